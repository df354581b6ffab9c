"""The card: one renderer, fixed width, honest ETA and measured RAM."""

from __future__ import annotations

import json
from pathlib import Path

from core.card import (
    WIDTH,
    Card,
    count_text,
    measure_ram,
    progress_bar,
    render_text,
    snapshot,
    write_snapshot,
)

SKILL_KEYS = {
    "run_id",
    "phase",
    "step",
    "data_source",
    "ram_budget",
    "elapsed",
    "eta",
    "percent_complete",
    "progress_bar",
    "current_anchor",
    "current_train",
    "current_gap",
    "best_anchor",
    "best_train",
    "best_gap",
    "completed_count",
    "total_candidates",
}


def full_card() -> Card:
    return Card(
        run_id="01JABCDEFGHJKMNPQRSTVWXYZ0",
        kind="train",
        trainer="qlora",
        status="running",
        phase="launch_trainer",
        step=120,
        total_steps=400,
        data_source="routerbench:route-w3",
        ram_used_gb=1.9,
        ram_total_gb=23.0,
        eta_s=151,
        percent=30.0,
        loss=0.412,
        best_anchor=0.812,
        best_train=0.871,
        best_gap=0.059,
        best_candidate="7",
    )


def test_every_line_has_the_same_width_whatever_the_content() -> None:
    long = full_card().model_copy(
        update={
            "phase": "p" * 80,
            "data_source": "d" * 80,
            "kind": "hillclimb",
            "status": "interrupted",
        }
    )
    for card in (full_card(), Card(run_id="x", kind="selftest"), long):
        lines = render_text(card).splitlines()
        assert len(lines) == 7
        assert {len(line) for line in lines} == {WIDTH}
        assert all(line.isascii() for line in lines)


def test_card_shows_step_eta_bar_and_best() -> None:
    text = render_text(full_card())
    assert "step  120/400" in text and "02:31" in text
    assert "[#####-------------]   30.0%" in text
    assert "anchor 0.812 train 0.871 gap 0.059  (cand 7)" in text
    assert "RAM  1.9/23.0 GB" in text


def test_unknown_eta_says_estimating_and_zero_is_a_score() -> None:
    card = Card(run_id="x", kind="train", current_anchor=0.0)
    text = render_text(card)
    assert "estimating" in text and "anchor 0.000" in text
    assert progress_bar(0) == "[" + "-" * 18 + "]" and progress_bar(100) == "[" + "#" * 18 + "]"


def test_ram_is_measured() -> None:
    used, total = measure_ram()
    assert 0 < used < total
    import os

    mine, _ = measure_ram([os.getpid()])
    assert 0.001 < mine < used


def test_snapshot_has_the_skill_keys_plus_ours(tmp_path: Path) -> None:
    write_snapshot(full_card(), tmp_path)
    data = json.loads((tmp_path / "progress.snapshot.json").read_text())
    assert set(data) >= SKILL_KEYS
    assert data["eta"] == "02:31" and data["percent_complete"] == 30.0
    assert data["card"]["trainer"] == "qlora" and data["text"] == render_text(full_card())
    assert snapshot(full_card())["progress_bar"] == progress_bar(30.0)


def test_committed_json_schemas_match_the_models() -> None:
    from app.cli.schemas import schema_files
    from tests.conftest import ROOT

    for name, text in schema_files().items():
        assert (ROOT / "specs" / "schemas" / name).read_text() == text, (
            f"run `trm schemas` ({name})"
        )


def test_an_eval_pass_shows_in_the_phase_line_with_its_own_rows() -> None:
    """The QLoRA sample sat 21 minutes in its val pass showing `phase launch_trainer -`."""
    card = full_card().model_copy(
        update={
            "step": None,
            "total_steps": None,
            "eta_s": None,
            "pass_name": "eval",
            "pass_done": 120,
            "pass_total": 480,
            "pass_unit": "rows",
        }
    )
    text = render_text(card)
    assert "phase   launch_trainer eval   120/480 rows" in text
    assert "ETA     estimating" in text and "00:00" not in text
    data = snapshot(card)
    assert data["card"]["pass_name"] == "eval" and data["card"]["pass_done"] == 120
    assert data["eta"] == "estimating"


def test_a_counter_says_what_it_counts() -> None:
    read = Card(
        run_id="x",
        kind="train",
        phase="prepare_corpus",
        step=2239574,
        total_steps=2239574,
        unit="bytes",
    )
    assert "prepare_corpus        2.24 MB/2.24 MB read" in render_text(read)
    assert snapshot(read)["unit"] == "bytes"
    assert count_text(1500, 2_000_000, "bytes") == "1.50 KB/2.00 MB read"
    assert count_text(37, 480, "rows") == "37/480 rows"
    assert count_text(12, 400, None) == "step  12/400" and count_text(None, None, None) == "-"


def test_the_top_line_always_says_the_status_however_long_kind_and_trainer() -> None:
    """Pollers (the skill, `trm watch --once | head -1`) read the status on the top line."""
    run_id = "01JABCDEFGHJKMNPQRSTVWXYZ0"  # a ULID's full 26 characters
    for kind in ("train", "bench", "hillclimb", "selftest"):
        for trainer in (None, "trm", "gbdt", "qlora"):
            for status in ("queued", "running", "completed", "interrupted", "cancelling"):
                card = Card(run_id=run_id, kind=kind, trainer=trainer, status=status)
                top = render_text(card).splitlines()[0]
                assert f"  {status} " in top and run_id in top, top
                assert len(top) == WIDTH
    top = render_text(Card(run_id=run_id, kind="train", trainer="qlora", status="completed"))
    assert "  train  completed " in top.splitlines()[0]  # the trainer gives way to the status
