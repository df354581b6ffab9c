"""A search on the real service: real API, real workers, real child `train` runs (trm on CPU)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from worker.envs import generate

pytestmark = [
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


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


def test_two_workers_run_two_candidates_at_the_same_time_and_never_train_one_corpus_twice(
    service: Service, settings: Settings
) -> None:
    service.start_worker("worker-a")
    service.start_worker("worker-b")
    # On this data shared tags rename nothing: turning them alone cannot change the corpus, and
    # with recovery_rate 0.2 they build the same corpus as recovery_rate 0.2 alone.
    knobs = {"namespace_normalization": [False, True], "recovery_rate": [None, 0.2],
             "negative_rate": [None]}  # fmt: skip
    search = service.submit(tiny_search(settings.data_dir, knobs=knobs))
    done = service.wait_status(search["id"], "completed", "failed", timeout=150)
    assert done["status"] == "completed", done
    rows = service.ledger(search["id"])
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
    children = service.http.get("/runs", params={"parent": search["id"]}).json()["runs"]
    assert len(children) == len(trained) and {c["kind"] for c in children} == {"train"}
    run_dir = settings.runs_dir / search["id"]
    summary = json.loads((run_dir / "search_summary.json").read_text())
    assert summary["root_candidate_run"] == finished["c000"]["run_id"]
    assert summary["best_run"] == finished[summary["best_candidate"]]["run_id"]
    assert (run_dir / "best" / "best.json").exists() and (
        run_dir / "best" / "scorecard.json"
    ).exists()
    for cid in finished:
        assert json.loads((run_dir / "candidates" / cid / "result.json").read_text())["decision"]
    lines = (run_dir / "hillclimb_ledger.jsonl").read_text().splitlines()
    assert len(lines) == len(rows)
    card = service.http.get(f"/runs/{search['id']}/card").json()
    assert card["completed_count"] == 3 and card["best_candidate"] == summary["best_candidate"]


def test_a_killed_coordinator_resumes_without_redoing_candidates(
    service: Service, settings: Settings
) -> None:
    service.start_worker("worker-a")
    service.start_worker("worker-b")
    # Three candidates, two at a time: when the first finishes the coordinator is killed with the
    # second (or the third) still training, so its successor must take up finished and running
    # candidates alike. Each candidate is two child processes that import torch (seconds of CPU
    # each): four in a row, on cores shared with other tests, took up to three minutes.
    search = service.submit(tiny_search(settings.data_dir, max_candidates=3, parallelism=2))

    def one_finished() -> bool:
        return any(r["event"] == "finished" for r in service.ledger(search["id"]))

    wait_for(one_finished, timeout=90, what="a first finished candidate")
    service.kill_worker_holding(search["id"])
    service.start_worker("worker-c")
    done = service.wait_status(search["id"], "completed", "failed", timeout=180)
    assert done["status"] == "completed", done
    assert done["attempt"] == 2
    rows = service.ledger(search["id"])
    assert max(Counter((r["candidate_id"], r["event"]) for r in rows).values()) == 1
    children = service.http.get("/runs", params={"parent": search["id"]}).json()["runs"]
    proposed = [r for r in rows if r["event"] == "proposed"]
    assert len(children) == len(proposed) == 3
