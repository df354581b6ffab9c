"""The search logic against a real ledger database, with candidates scored by pure functions."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.hillclimb.conftest import FakeLauncher, scores, search_spec
from worker.hillclimb.search import SearchRun

Make = Callable[..., SearchRun]

NEG = {None: 0.0, 0.1: 0.05, 0.25: 0.10, 0.5: 0.04}
REC = {None: 0.0, 0.1: 0.03, 0.2: 0.06, 0.3: 0.02}


def landscape(knobs: dict[str, Any], rung: int) -> dict[str, float]:
    """One peak: negatives 0.25, recovery 0.2, shared tags."""
    anchor = 0.5 + NEG[knobs["negative_rate"]] + REC[knobs["recovery_rate"]]
    anchor += 0.02 * knobs["namespace_normalization"] + 0.005 * rung
    return scores(round(anchor, 4))


def is_root(knobs: dict[str, Any]) -> bool:
    turned = ("negative_rate", "recovery_rate", "namespace_normalization")
    return not any(knobs[name] for name in turned)


def finished(search: SearchRun) -> list[dict[str, Any]]:
    return [row for row in search.ledger.rows() if row["event"] == "finished"]


def test_search_climbs_past_the_root_by_more_than_the_noise_margin(search_db: Make) -> None:
    search = search_db(search_spec(max_candidates=14), FakeLauncher(landscape))
    assert search.run() == "completed"
    rows = finished(search)
    root, best = rows[0], search.state.best
    assert best is not None and best.anchor > root["anchor_score"] + 0.02
    bests = [r["anchor_score"] for r in rows if r["decision"] == "best"]
    assert all(b > a + 0.02 for a, b in zip(bests, bests[1:], strict=False))
    for row in rows[1:]:  # every candidate turned one or two knobs (or only moved a rung)
        proposal = next(
            r
            for r in search.ledger.rows()
            if r["candidate_id"] == row["candidate_id"] and r["event"] == "proposed"
        )
        turned = set(proposal["knob_diff"]) - {"rung", "heldout_breadth", "state_compression"}
        assert len(set(proposal["knob_diff"])) >= 1 and len(turned) <= 2
    assert search.state.stopped


def test_a_candidate_within_the_noise_margin_of_the_best_is_not_kept_as_best(
    search_db: Make,
) -> None:
    def flat(knobs: dict[str, Any], rung: int) -> dict[str, float]:
        return scores(0.60 if is_root(knobs) else 0.615)  # +0.015 < noise margin 0.02

    search = search_db(search_spec(max_candidates=4, patience=10), FakeLauncher(flat))
    search.run()
    decisions = [(r["candidate_id"], r["decision"]) for r in finished(search)]
    assert decisions[0] == ("c000", "best")
    assert all(d in ("discard", "branch") for _, d in decisions[1:])
    assert search.state.best_id == "c000"
    assert all("noise margin" in r["reason"] for r in finished(search)[1:])


def test_a_near_tie_with_a_smaller_gap_is_kept_as_a_branch(search_db: Make) -> None:
    def tie(knobs: dict[str, Any], rung: int) -> dict[str, float]:
        if is_root(knobs):
            return scores(0.60, train=0.75)
        return scores(0.605, train=0.66)

    search = search_db(search_spec(max_candidates=3, patience=10), FakeLauncher(tie))
    search.run()
    assert [r["decision"] for r in finished(search)] == ["best", "branch", "branch"]
    assert search.state.branch_ids == ["c001", "c002"]


def test_a_candidate_over_the_gap_ceiling_is_not_kept(search_db: Make) -> None:
    def overfit(knobs: dict[str, Any], rung: int) -> dict[str, float]:
        if is_root(knobs):
            return scores(0.60)
        return scores(0.90, train=1.0 + 0.2)  # far better anchor, gap 0.3 > 0.2

    search = search_db(search_spec(max_candidates=3, patience=10), FakeLauncher(overfit))
    search.run()
    rows = finished(search)
    assert [r["decision"] for r in rows] == ["best", "discard", "discard"]
    assert "over the ceiling" in rows[1]["reason"]
    assert search.state.best_id == "c000"


def test_failures_count_toward_patience_move_the_rung_down_then_stop(search_db: Make) -> None:
    def brittle(knobs: dict[str, Any], rung: int) -> dict[str, float] | None:
        return scores(0.6) if is_root(knobs) and rung == 2 else None

    spec = search_spec(start_rung=2, patience=3, max_candidates=20)
    search = search_db(spec, FakeLauncher(brittle))
    search.run()
    events = [(r["candidate_id"], r["event"], r["decision"]) for r in search.ledger.rows()]
    ends = [e for e in events if e[1] in ("finished", "rung", "stopped")]
    assert ends[:5] == [
        ("c000", "finished", "best"),
        ("c001", "finished", "failed"),
        ("c002", "finished", "failed"),
        ("c003", "finished", "failed"),
        ("rung1", "rung", None),
    ]
    assert search.state.rung_history[0]["to"] == 1
    assert "failed" in search.state.rung_history[0]["reason"]
    # After the move, three more failures are a plateau: the search stops.
    assert ends[-1][1] == "stopped" and search.state.proposed == 7
    assert "plateau" in (search.state.stopped or "")


def test_a_small_gap_plateau_moves_the_rung_up_and_the_children_change_rung(
    search_db: Make,
) -> None:
    launcher = FakeLauncher(lambda knobs, rung: scores(0.6, train=0.61))
    search = search_db(search_spec(patience=2, max_candidates=6), launcher)
    search.run()
    assert search.state.rung_history[0]["from"] == 0 and search.state.rung_history[0]["to"] == 1
    first_on_new_rung = launcher.world["c003"].body
    assert first_on_new_rung["corpus"]["knobs"]["heldout_breadth"] == 3
    proposal = next(
        r for r in search.ledger.rows() if r["candidate_id"] == "c003" and r["event"] == "proposed"
    )
    assert proposal["rung"] == 1 and proposal["knob_diff"]["rung"] == [0, 1]


def test_resuming_a_killed_search_redoes_nothing(search_db: Make) -> None:
    world: dict[str, Any] = {}
    spec = search_spec(max_candidates=10, parallelism=2, patience=20)
    first = search_db(spec, FakeLauncher(landscape, seconds=0.05, world=world))
    first.stop = lambda: "shutdown" if len(finished(first)) >= 4 else None
    assert first.run() == "shutdown"
    done_before = {r["candidate_id"] for r in finished(first)}
    in_flight_before = {c.candidate_id for c in first.state.in_flight}
    assert len(done_before) >= 4 and in_flight_before

    second_launcher = FakeLauncher(landscape, seconds=0.05, world=world)
    second = search_db(spec, second_launcher)
    assert second.run() == "completed"
    assert not set(second_launcher.created) & (done_before | in_flight_before)
    rows = second.ledger.rows()
    assert Counter((r["candidate_id"], r["event"]) for r in rows).most_common(1)[0][1] == 1
    assert sorted(r["candidate_id"] for r in rows if r["event"] == "finished") == [
        f"c{i:03d}" for i in range(10)
    ]
    lines = second.ledger.path.read_text().splitlines()
    assert sorted(json.loads(line)["seq"] for line in lines) == [r["seq"] for r in rows]


def test_a_crash_between_proposing_and_launching_launches_once_on_resume(
    search_db: Make,
) -> None:
    world: dict[str, Any] = {}

    class Crashy(FakeLauncher):
        def launch(self, candidate_id: str, body: dict[str, Any]) -> str:
            if candidate_id == "c002":
                raise RuntimeError("worker killed")
            return super().launch(candidate_id, body)

    spec = search_spec(max_candidates=4, patience=20)
    first = search_db(spec, Crashy(landscape, world=world))
    with pytest.raises(RuntimeError):
        first.run()
    resumed_launcher = FakeLauncher(landscape, world=world)
    second = search_db(spec, resumed_launcher)
    second.run()
    assert resumed_launcher.created == ["c002", "c003"]
    proposals = [r for r in second.ledger.rows() if r["event"] == "proposed"]
    assert [r["candidate_id"] for r in proposals] == ["c000", "c001", "c002", "c003"]


def test_parallel_candidates_overlap_in_time(search_db: Make) -> None:
    spec = search_spec(max_candidates=4, parallelism=2, patience=20)
    search = search_db(spec, FakeLauncher(landscape, seconds=0.3))
    search.run()
    rows = {r["candidate_id"]: r for r in finished(search)}
    a, b = rows["c000"], rows["c001"]
    assert a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]


def test_cancel_cancels_the_candidates_in_flight(search_db: Make) -> None:
    launcher = FakeLauncher(landscape, seconds=30)
    search = search_db(search_spec(parallelism=2), launcher)
    calls = iter([None, None, "cancel"])
    search.stop = lambda: next(calls, "cancel")
    assert search.run() == "cancel"
    assert sorted(launcher.cancelled) == ["run-c000", "run-c001"]


def test_the_card_counts_candidates_and_shows_the_best(search_db: Make) -> None:
    seen: list[tuple[int, str | None]] = []
    search = search_db(search_spec(max_candidates=5), FakeLauncher(landscape))
    search.on_change = lambda state: seen.append((len(state.finished), state.best_id))
    search.run()
    assert seen[-1][0] == 5 and seen[-1][1] is not None
    assert [n for n, _ in seen] == sorted(n for n, _ in seen)
