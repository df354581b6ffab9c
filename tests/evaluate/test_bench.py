"""The bench kind's stages, called directly with a stand-in publisher: resolve, evaluate, cache,
and the errors a user sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.card import Card
from core.settings import Settings
from worker.context import StageContext, StageFailure
from worker.kinds import bench


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def publish(self, run_id: str, type_: str, data: dict[str, Any]) -> None:
        self.events.append((type_, data))


def ctx_for(root: Path, run_id: str, stage: str) -> StageContext:
    settings = Settings(runs_dir=root / "runs", data_dir=root / "data", model_cache=root / "models")
    run_dir = settings.runs_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    return StageContext(
        run_id=run_id,
        kind="bench",
        stage=stage,
        attempt=1,
        run_dir=run_dir,
        settings=settings,
        publisher=Events(),
        card=Card(run_id=run_id, kind="bench"),
        spec={},  # type: ignore[arg-type]
    )


def run_bench(root: Path, run_id: str, spec: dict[str, Any]) -> tuple[dict, StageContext]:
    bench.resolve(ctx_for(root, run_id, "resolve"), spec)
    ctx = ctx_for(root, run_id, "evaluate")
    return bench.evaluate(ctx, spec), ctx


SPEC = {"kind": "bench", "bench": "routerbench", "baseline": "none", "router": "none"}
# Run references are run ids (ULIDs): anything else is read as a path.
UNFINISHED, GBDT_RUN = "01J00000000000000000000000", "01J00000000000000000000001"


def test_a_second_identical_bench_does_no_forward_passes(tmp_path):
    first, ctx1 = run_bench(tmp_path, "b1", SPEC)
    card = json.loads((ctx1.run_dir / "scorecard.json").read_text())
    assert card["router"]["n"]["anchor"] > 100
    first_n = card["router"]["n"]["anchor"]
    assert card["delta"]["anchor_score"]["value"] == 0.0  # the same untrained model on both sides
    # What a user would pick instead, on the router's own anchors.
    for name in ("majority", "gbdt"):
        assert card["references"][name]["anchor_score"]["n"] == card["router"]["n"]["anchor"]
    assert card["references"]["gbdt"]["anchor_score"]["value"] > 0.8
    assert ctx1.counters["forward_passes"] > 0
    # A bench's best_anchor (the runs list's column) is its router's score.
    assert ctx1.card.best_anchor == card["router"]["anchor_score"] is not None
    resolved = json.loads((ctx1.run_dir / "bench.resolved.json").read_text())
    assert resolved["split"]["anchor"] == ["route-s1000-w8", "route-s1000-w9"]
    # The scores live in the first run's directory; outside the runs, only the shared bench data.
    assert list((tmp_path / "runs" / "b1").glob("evaluate/sample_cache/*.jsonl"))
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["benches"]
    second, ctx2 = run_bench(tmp_path, "b2", SPEC)
    assert ctx2.counters["forward_passes"] == 0
    assert ctx2.counters["examples_cached"] == ctx2.counters["examples_scored"]
    assert second == first
    samples = (ctx2.run_dir / "samples.jsonl").read_text().splitlines()
    assert {"example_hash", "candidates", "scores", "pick", "correct"} <= set(
        json.loads(samples[0])
    )
    # `train_sample` and `episodes` size the rest of a bench (what an LM side costs): fewer train
    # rows, each one scored already.
    _, ctx3 = run_bench(tmp_path, "b3", {**SPEC, "train_sample": 30, "episodes": 2})
    card = json.loads((ctx3.run_dir / "scorecard.json").read_text())
    assert card["router"]["n"] == {"train": 30, "anchor": first_n} == card["baseline"]["n"]
    resolved = json.loads((ctx3.run_dir / "bench.resolved.json").read_text())
    assert (resolved["train_sample"], resolved["episodes"]) == (30, 2)
    assert ctx3.counters["forward_passes"] == 0


@pytest.mark.parametrize("name", ["primehub-envs", "primehub-baseline"])
def test_a_bench_with_a_missing_data_file_fails_with_dependency_and_the_path(tmp_path, name):
    spec = {"kind": "bench", "bench": name, "results_jsonl": "exports/results.jsonl"}
    with pytest.raises(StageFailure) as caught:
        bench.resolve(ctx_for(tmp_path, "b3", "resolve"), spec)
    assert caught.value.failure_class == "dependency"
    assert str(tmp_path / "data" / "exports" / "results.jsonl") in caught.value.reason


def test_an_unfinished_run_as_router_is_bad_input_naming_it(tmp_path):
    (tmp_path / "runs" / UNFINISHED).mkdir(parents=True)
    with pytest.raises(StageFailure) as caught:
        bench.resolve(ctx_for(tmp_path, "b4", "resolve"), {**SPEC, "router": UNFINISHED})
    assert caught.value.failure_class == "bad_input"
    assert UNFINISHED in caught.value.reason


def test_a_gbdt_train_run_benches_as_the_router(tmp_path, route_corpus):
    """A completed `trainer: gbdt` run is a router like any other: its model.txt is scored."""
    from worker.train import gbdt
    from worker.train.callbacks import TrainerCallbacks

    run = tmp_path / "runs" / GBDT_RUN
    gbdt.train({}, route_corpus, run / "trainer", TrainerCallbacks(), seed=0)
    (run / "summary.json").write_text(json.dumps({"status": "completed", "dry_run": False}))
    first, ctx = run_bench(tmp_path, "b5", {**SPEC, "router": GBDT_RUN})
    resolved = json.loads((ctx.run_dir / "bench.resolved.json").read_text())
    assert resolved["router"]["policy"] == {"type": "gbdt", "path": str(run / "trainer")}
    card = json.loads((ctx.run_dir / "scorecard.json").read_text())
    assert card["router"]["model"]["name"].startswith("gbdt:")
    assert card["delta"]["anchor_score"]["value"] > 0  # a trained ranker beats an untrained trm
