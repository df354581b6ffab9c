"""Progress that tells the truth: the card shows a trainer's eval pass and its rows, an
ETA that says `estimating` until a rate is known (never the stage before's 00:00), what a
counter counts (`MB read`, `rows`), and the score a train run measured as its `best_anchor`, in
the runs list as on the card (a bench's: tests/evaluate/test_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.card import Card, render_text
from core.settings import Settings
from tests.conftest import Service, rows_folder

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
TINY_TRM = {"hidden": 16}


def card_events(settings: Settings, run_id: str) -> list[Card]:
    lines = (settings.run_dir(run_id) / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [Card(**e["data"]) for e in events if e["type"] == "card"]


@SQLITE_ONLY
def test_a_train_runs_card_shows_its_passes_and_counts_and_its_best_anchor_is_listed(
    service: Service, settings: Settings, route_corpus: Path
) -> None:
    source = {"type": "jsonl", "name": "r", "path": rows_folder(settings, route_corpus)}
    # A probe: one step, then evaluate scores one train row and one anchor (a few seconds).
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": TINY_TRM,
        "corpus": {"sources": [source]},
        "probe": True,
    }
    run = service.submit(spec)
    service.start_worker()
    done = service.wait_status(run["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done.get("failure_reason")
    scorecard = json.loads((settings.run_dir(run["id"]) / "scorecard.json").read_text())
    anchor = scorecard["anchor_score"]
    assert done["best_anchor"] == anchor
    listed = service.http.get("/runs").json()
    assert [r["best_anchor"] for r in listed["runs"] if r["id"] == run["id"]] == [anchor]
    text = service.http.get(f"/runs/{run['id']}/card", params={"format": "text"}).text
    assert f"best    anchor {anchor:.3f}" in text, text

    cards = card_events(settings, run["id"])
    read = [c for c in cards if c.phase == "prepare_corpus" and c.step is not None]
    assert read and all(c.unit == "bytes" for c in read)
    assert " KB read" in render_text(read[-1]) or " MB read" in render_text(read[-1])
    # The stages after the corpus start with no rate: `estimating`, never the corpus's 00:00.
    trainer = [c for c in cards if c.phase == "launch_trainer"]
    for card in [c for c in cards if c.phase == "prepare_config"] + trainer[:1]:
        assert card.eta_s is None and "ETA     estimating" in render_text(card), card
    # The trainer's eval pass over the val rows is on the card, with its own count, and ends.
    corpus = settings.run_dir(run["id"]) / "corpus"
    val_rows = len((corpus / "val.jsonl").read_text().splitlines())
    passes = [c for c in trainer if c.pass_name == "eval"]
    assert passes and passes[0].pass_total == val_rows and passes[0].eta_s is None
    text = render_text(passes[0])
    assert f"phase   launch_trainer eval   0/{val_rows} rows" in text, text
    assert trainer[-1].pass_name is None and "step  1/1" in render_text(trainer[-1])
    scored = [c for c in cards if c.phase == "evaluate" and c.step is not None]
    assert scored and all(c.unit == "rows" for c in scored)
    assert f"{scored[-1].step}/{scored[-1].total_steps} rows" in render_text(scored[-1])
