"""Candidates that would waste a training run or mislead the keep rule: a mutation that cannot
change the data, a candidate that would train exactly what another one trained, and a candidate
that scores like the untrained model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.hillclimb.conftest import FakeLauncher, scores, search_spec
from worker.hillclimb.search import SearchRun

Make = Callable[..., SearchRun]
KNOBS = {"negative_rate": [None, 0.25], "recovery_rate": [None, 0.2]}


def rows_of(search: SearchRun, event: str) -> list[dict[str, Any]]:
    return [row for row in search.ledger.rows() if row["event"] == event]


def no_negatives(knobs: dict[str, Any], rung: int) -> Any:
    """Data without negative rows: negative_rate changes nothing, the other knobs do."""
    return [rung, {k: v for k, v in knobs.items() if k != "negative_rate"}]


def by_recovery(knobs: dict[str, Any], rung: int) -> dict[str, float]:
    return scores(0.6 + (0.05 if knobs["recovery_rate"] else 0.0) + 0.01 * rung)


def test_a_knob_that_cannot_change_the_data_is_reported_not_trained(search_db: Make) -> None:
    effects = {"negative_rate": {"requested": 0.25, "available": 0, "kept": 0}}
    launcher = FakeLauncher(by_recovery, corpus=no_negatives, effects=effects)
    spec = search_spec(knobs={**KNOBS, "namespace_normalization": [False]}, max_candidates=4)
    search = search_db(spec, launcher)
    assert search.run() == "completed"
    skipped = rows_of(search, "not_tried")
    assert skipped, "the negative_rate mutation was trained instead of reported"
    for row in skipped:
        assert set(row["knob_diff"]) == {"negative_rate"} and row["status"] == "not_tried"
        assert re.match(r"negative_rate \S+->\S+ cannot change the data", row["reason"])
        assert '"available": 0' in row["reason"]  # what the corpus build saw, for a person
    trained = [launcher.world[c].body["corpus"]["knobs"] for c in launcher.created]
    corpora = [json.dumps(no_negatives(k, 0), sort_keys=True) for k in trained]
    assert len(set(corpora)) == len(corpora)  # no corpus was trained twice
    assert search.state.not_tried[0]["reason"] == skipped[0]["reason"]


def test_a_candidate_that_would_train_a_finished_ones_corpus_reuses_its_result(
    search_db: Make,
) -> None:
    # Only recovery_rate shapes the corpus here, so moving a rung up changes nothing either.
    def recovery_only(knobs: dict[str, Any], rung: int) -> Any:
        return knobs["recovery_rate"]

    def root_best(knobs: dict[str, Any], rung: int) -> dict[str, float]:
        return scores(0.7 if knobs["recovery_rate"] is None else 0.6)

    launcher = FakeLauncher(root_best, corpus=recovery_only)
    spec = search_spec(knobs=KNOBS, patience=1, max_candidates=3)
    search = search_db(spec, launcher)
    assert search.run() == "completed"
    finished = {row["candidate_id"]: row for row in rows_of(search, "finished")}
    moved = rows_of(search, "rung")
    assert moved, "the search never moved a rung"
    after = next(r for r in finished.values() if r["seq"] > moved[0]["seq"])
    root = finished["c000"]
    assert after["reused_from"] == root["run_id"] == "run-c000"
    assert after["candidate_id"] not in launcher.created  # nothing trained for it
    assert after["anchor_score"] == root["anchor_score"] and after["decision"] != "best"
    assert "reused c000's result" in after["reason"]
    assert after["corpus_hash"] == root["corpus_hash"]
    assert search.state.candidates[after["candidate_id"]].reused_from == "run-c000"


def test_a_candidate_that_scores_like_the_untrained_model_is_flagged_and_never_best(
    search_db: Make,
) -> None:
    def untrained_at_root(knobs: dict[str, Any], rung: int) -> dict[str, float]:
        anchor = 0.2887 if not knobs["recovery_rate"] else 0.45
        return {**scores(anchor), "untrained_score": 0.2887}

    warnings: list[str] = []
    launcher = FakeLauncher(untrained_at_root)
    spec = search_spec(knobs={"recovery_rate": [None, 0.2]}, max_candidates=2)
    search = search_db(spec, launcher, warn=warnings.append)
    search.run()
    root, second = rows_of(search, "finished")
    assert root["untrained_like"] is True and root["decision"] == "discard"
    assert root["untrained_score"] == 0.2887
    assert "scores like the untrained model" in root["reason"]
    assert second["untrained_like"] is False and second["decision"] == "best"
    assert search.state.best_id == second["candidate_id"]
    assert warnings == [
        "candidate c000 scores like the untrained model (anchor 0.2887, untrained 0.2887): it "
        "learned nothing the anchors can see and is not kept as best"
    ]


def test_a_candidate_whose_twin_is_still_training_waits_and_reuses_it(search_db: Make) -> None:
    def recovery_only(knobs: dict[str, Any], rung: int) -> Any:
        return knobs["recovery_rate"]

    launcher = FakeLauncher(by_recovery, seconds=0.1, corpus=recovery_only)
    spec = search_spec(
        knobs={"namespace_normalization": [False, True], "recovery_rate": [None, 0.2]},
        max_candidates=3,
        parallelism=2,
        patience=5,
    )
    search = search_db(spec, launcher)
    assert search.run() == "completed"
    finished = rows_of(search, "finished")
    assert len(finished) == 3 and len(launcher.created) == 2  # one result reused, not retrained
    reused = [r for r in finished if r["reused_from"]]
    assert len(reused) == 1
    twin = next(
        r for r in finished if r["run_id"] == reused[0]["reused_from"] and r is not reused[0]
    )
    # Which of the two shares a corpus with the other depends on who finishes first (a busy
    # machine reorders them); that they share one does not.
    assert twin["knobs"]["recovery_rate"] == reused[0]["knobs"]["recovery_rate"]
