"""A search on the real service: real API, real workers, real child `train` runs (trm on CPU).
One search, run by two workers with `promote` asked, is shared by the tests of what it left: its
candidates and ledger, the controller version it promoted, and a bench of its `:final` and
`:root` (each search is minutes of CPU: child runs that import torch). A killed coordinator's
resume is tests/fault/test_coordinator_kill.py's."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.db import make_engine
from core.promotion import promote_search_best
from core.schemas.hillclimb import PromoteBest
from core.settings import Settings
from tests.conftest import Service, module_service
from tests.stack import wait_for
from worker.envs import generate

PROMOTE = {"name": "route-picker", "abstain_margin": 0.05}


def tiny_search(data_dir: Path, **overrides: Any) -> dict[str, Any]:
    """Four route worlds of a few episodes, a ten-step trm: a candidate takes seconds. Every
    knob set it turns builds a different corpus (so every candidate trains)."""
    generate(data_dir / "play", families=["route"], worlds=4, episodes=4, seed=3)
    spec: dict[str, Any] = {
        "kind": "hillclimb",
        "name": "tiny search",
        "base": {
            "trainer": "trm",
            "corpus": {
                "sources": [{"type": "trm_play_root", "name": "route", "path": "play"}],
                "split": {"by": "env", "anchor": ["route-s3-w3"]},
            },
            # Ten steps on 19 rows: enough to beat its untrained self on the anchors (one step
            # was not, and such a candidate is never kept as best).
            "trm": {"epochs": 10, "hidden": 16, "n_recursions": 1},
        },
        "start_rung": 3,
        "knobs": {
            "namespace_normalization": [False],
            "recovery_rate": [None, 0.2],
            "negative_rate": [None, 0.1],
        },
        "patience": 5,
        "max_candidates": 3,
        "parallelism": 2,
        "max_generalization_gap": 1.0,
    }
    spec.update(overrides)
    return spec


@dataclass(frozen=True)
class Searched:
    service: Service
    settings: Settings
    id: str
    summary: dict[str, Any]  # search_summary.json


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Searched]:
    """A completed search on SQLite: three candidates, two at a time on two workers, its best
    promoted as `route-picker`."""
    with module_service("sqlite", tmp_path_factory.mktemp("search"), workers=2) as service:
        settings = service.settings
        # On this data shared tags rename nothing: turning them alone cannot change the corpus,
        # and with recovery_rate 0.2 they build the same corpus as recovery_rate 0.2 alone.
        knobs = {
            "namespace_normalization": [False, True],
            "recovery_rate": [None, 0.2],
            "negative_rate": [None],
        }
        spec = tiny_search(settings.data_dir, knobs=knobs, promote=PROMOTE)
        search = service.submit(spec)
        done = service.wait_status(search["id"], "completed", "failed", timeout=150)
        assert done["status"] == "completed", done
        summary = json.loads((settings.run_dir(search["id"]) / "search_summary.json").read_text())
        yield Searched(service, settings, search["id"], summary)


def test_two_workers_run_two_candidates_at_the_same_time_and_never_train_one_corpus_twice(
    searched: Searched,
) -> None:
    service, settings, search_id = searched.service, searched.settings, searched.id
    rows = service.ledger(search_id)
    assert max(Counter((r["candidate_id"], r["event"]) for r in rows).values()) == 1
    finished = {r["candidate_id"]: r for r in rows if r["event"] == "finished"}
    assert sorted(finished) == ["c000", "c001", "c002"]
    a, b = finished["c000"], finished["c001"]
    assert a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
    trained = {cid: r for cid, r in finished.items() if not r["reused_from"]}
    reused = {cid: r for cid, r in finished.items() if r["reused_from"]}
    skipped = [r for r in rows if r["event"] == "not_tried"]
    assert reused or skipped, rows  # the inert knob was caught, one way or the other
    assert len({r["corpus_hash"] for r in trained.values()}) == len(trained)  # none twice
    runs = {r["run_id"]: r for r in trained.values()}
    for row in reused.values():
        assert runs[row["reused_from"]]["corpus_hash"] == row["corpus_hash"]
    for row in skipped:
        assert (
            "cannot change the data" in row["reason"] and "namespace_normalization" in row["reason"]
        )
    for row in trained.values():  # each trm candidate measured against its untrained self
        assert isinstance(row["untrained_score"], float), row
        assert isinstance(row["untrained_like"], bool)
    children = service.http.get("/runs", params={"parent": search_id}).json()["runs"]
    assert len(children) == len(trained) and {c["kind"] for c in children} == {"train"}
    run_dir = settings.runs_dir / search_id
    summary = searched.summary
    assert summary["root_candidate_run"] == finished["c000"]["run_id"]
    assert summary["best_run"] == finished[summary["best_candidate"]]["run_id"]
    assert (run_dir / "best" / "best.json").exists() and (
        run_dir / "best" / "scorecard.json"
    ).exists()
    for cid in finished:
        assert json.loads((run_dir / "candidates" / cid / "result.json").read_text())["decision"]
    lines = (run_dir / "hillclimb_ledger.jsonl").read_text().splitlines()
    assert len(lines) == len(rows)
    card = service.http.get(f"/runs/{search_id}/card").json()
    assert card["completed_count"] == 3 and card["best_candidate"] == summary["best_candidate"]


def test_a_search_that_asks_promotes_its_best_once_and_says_so(searched: Searched) -> None:
    service, search_id, summary = searched.service, searched.id, searched.summary
    promotion = summary["promotion"]
    assert promotion["promoted"] is True, promotion
    assert promotion["name"] == "route-picker" and promotion["version"] == 1
    assert promotion["candidate"] == summary["best_candidate"]
    assert promotion["run_id"] == summary["best_run"]

    shown = service.http.get("/controllers/route-picker")
    assert shown.status_code == 200, shown.text
    live = shown.json()["live"]
    assert live["version"] == 1 and live["live"] is True
    assert live["run_id"] == summary["best_run"]
    assert live["source_run_id"] == search_id
    assert live["candidate_id"] == summary["best_candidate"]
    assert live["promoted_by"] == f"hill-climb {search_id}"
    assert live["abstain_margin"] == 0.05

    # The finalize stage run again (a restarted coordinator) finds its version: no second one.
    engine = make_engine(searched.settings.database_url)
    again = promote_search_best(
        engine,
        searched.settings,
        search_id,
        (summary["best_run"], summary["best_candidate"]),
        PromoteBest(name="route-picker"),
    )
    engine.dispose()
    assert again.version == 1
    assert len(service.http.get("/controllers/route-picker").json()["versions"]) == 1


def test_a_promote_block_with_a_bad_name_is_refused_at_submit_naming_the_field(
    searched: Searched, tmp_path: Path
) -> None:
    service = searched.service

    def listed() -> list[str]:
        return [r["id"] for r in service.http.get("/runs").json()["runs"]]

    before = listed()
    spec = tiny_search(tmp_path, promote={"name": "Not A Name"})  # refused before it reads
    response = service.http.post("/runs", json=spec)
    assert response.status_code == 422, response.text
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert any(f.startswith("promote.name") for f in fields), fields
    assert listed() == before  # no run recorded


def test_a_dry_run_bench_of_a_search_final_resolves_as_the_real_bench_does(
    searched: Searched,
) -> None:
    """A bench of the finished search's `:final` and `:root`, from the summary.json the search
    itself wrote: the dry run resolves them as the real bench does (the dry run answered 422 "has
    no 'best_run'" while the real call was accepted)."""
    service, settings, search_id = searched.service, searched.settings, searched.id
    summary = json.loads((settings.run_dir(search_id) / "summary.json").read_text())
    best, root = summary["search"]["best_run"], summary["search"]["root_candidate_run"]
    assert best == searched.summary["best_run"] and root == searched.summary["root_candidate_run"]

    body = {"router": f"{search_id}:final", "baseline": f"{search_id}:root"}
    dry = service.http.post("/benches/routerbench", params={"dry_run": "true"}, json=body)
    assert dry.status_code == 202, dry.text
    planned = dry.json()["resolved"]
    assert planned["router"]["ref"] == f"{search_id}:final"
    assert planned["router"]["policy"]["path"] == str(settings.run_dir(best) / "trainer")
    assert planned["baseline"]["policy"]["path"] == str(settings.run_dir(root) / "trainer")

    real = service.http.post("/benches/routerbench", json=body)
    assert real.status_code == 202, real.text
    bench = real.json()["id"]
    # The worker's first stage resolves and records the bench; scoring it is not the point here.
    written = settings.run_dir(bench) / "bench.resolved.json"
    wait_for(written.is_file, 60, "the real bench to resolve its sides")
    resolved = json.loads(written.read_text())
    for side in ("router", "baseline"):
        assert resolved[side]["policy"] == planned[side]["policy"], side
    service.http.post(f"/runs/{bench}/cancel")  # 409 when it already ended: either is fine
