"""Dry-run planners (SPEC §3.2): resolve and validate everything, write the resolved config, train
nothing. Each returns a note per stage for its `planned` manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worker.context import StageContext, StageFailure
from worker.kinds import KINDS
from worker.manifests import write_json_atomic


def _check_sources(spec: dict[str, Any]) -> list[str]:
    found = []
    for i, source in enumerate(spec["corpus"]["sources"]):
        path = Path(source["path"])
        if not path.exists():
            raise StageFailure(
                "bad_input",
                f"corpus.sources[{i}].path: {path} does not exist "
                f"(source {source['name']!r}); put the data there or fix the path",
            )
        found.append(f"{source['name']}: {source['type']} at {path}")
    return found


def plan_train(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    from worker.stages.train import materialize_bench_data

    materialize_bench_data(spec, ctx.settings.data_dir)
    sources = _check_sources(spec)
    trainer = spec["trainer"]
    resolved = {
        "run_id": ctx.run_id,
        "trainer": trainer,
        "trainer_config": spec[trainer],
        "corpus": spec["corpus"],
        "budget": spec.get("budget"),
        "seed": spec.get("seed"),
        "dry_run": True,
        "stages": [s.name for s in KINDS["train"]],
    }
    write_json_atomic(ctx.run_dir / "trainer_config.resolved.json", resolved)
    return {
        "prepare_corpus": "would read " + "; ".join(sources),
        "prepare_config": "resolved config written to trainer_config.resolved.json",
        "launch_trainer": f"would train a {trainer} model",
        "evaluate": "would score train and anchor splits",
    }


def plan_generic(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    write_json_atomic(ctx.run_dir / "spec.resolved.json", spec)
    return {s.name: "would run" for s in KINDS[ctx.kind]}
