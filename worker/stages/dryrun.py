"""Dry-run planners (SPEC §3.2): resolve and validate everything, write the resolved config, train
nothing. Each returns a note per stage for its `planned` manifest."""

from __future__ import annotations

from typing import Any

from core.rundir import write_json_atomic
from worker.context import StageContext, StageFailure
from worker.kinds import KINDS


def _plan_corpus(ctx: StageContext, spec: dict[str, Any]) -> str:
    """Read and validate every source as the real build would, without writing the corpus;
    the manifest it would write goes to `corpus.plan.json`."""
    from core.schemas.corpus import CorpusSpec
    from worker.corpus import CorpusInputError, build_corpus

    try:
        result = build_corpus(
            CorpusSpec.model_validate(spec["corpus"]), ctx.run_dir / "corpus", dry_run=True
        )
    except CorpusInputError as exc:
        raise StageFailure("bad_input", str(exc)) from None
    write_json_atomic(ctx.run_dir / "corpus.plan.json", result.manifest)
    c = result.counters
    return (
        f"would read {c.get('rows_read', 0)} rows: keep {c.get('rows_kept', 0)}, "
        f"{c.get('rows_invalid', 0)} invalid, {c.get('duplicates', 0)} duplicates; "
        f"train/val/anchor/critic {c.get('train', 0)}/{c.get('val', 0)}/{c.get('anchor', 0)}/"
        f"{c.get('critic', 0)}; corpus_hash {result.corpus_hash[:12]} (see corpus.plan.json)"
    )


def plan_train(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    from worker.stages.train import materialize_bench_data

    materialize_bench_data(spec, ctx.settings.data_dir)
    corpus_note = _plan_corpus(ctx, spec)
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
        "prepare_corpus": corpus_note,
        "prepare_config": "resolved config written to trainer_config.resolved.json",
        "launch_trainer": f"would train a {trainer} model",
        "evaluate": "would score train and anchor splits",
    }


def plan_generic(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    write_json_atomic(ctx.run_dir / "spec.resolved.json", spec)
    return {s.name: "would run" for s in KINDS[ctx.kind]}
