"""The first two stages of a `train` run (SPEC §3.2): build the corpus, resolve the config.

`launch_trainer` and `evaluate` live with their code (worker/train/, worker/evaluate/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.rundir import write_json_atomic
from core.schemas.corpus import CorpusSpec
from worker.context import StageContext, StageFailure
from worker.corpus import CorpusInputError, build_corpus

CORPUS_DIR = "corpus"
TRAINER_DIR = "trainer"
RESOLVED_CONFIG = "trainer_config.resolved.json"


def materialize_bench_data(spec: dict[str, Any], data_dir: Path) -> list[str]:
    """Sources under DATA_DIR/benches/<name>/ of a shipped bench are generated on first use."""
    from worker.envs.benchdata import SPEC_DIR, ensure_bench_data

    made = []
    benches = (data_dir / "benches").resolve()
    for source in spec["corpus"]["sources"]:
        path = Path(source["path"]).resolve()
        if path.exists() or not path.is_relative_to(benches):
            continue
        name = path.relative_to(benches).parts[0]
        if (SPEC_DIR / f"{name}.json").exists():
            ensure_bench_data(name, data_dir)
            made.append(name)
    return made


def prepare_corpus(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    for name in materialize_bench_data(spec, ctx.settings.data_dir):
        ctx.note(f"generated the {name} bench data on first use")
    corpus = CorpusSpec.model_validate(spec["corpus"])
    out = ctx.run_dir / CORPUS_DIR
    try:
        result = build_corpus(corpus, out, progress=lambda done, total: ctx.progress(done, total))
    except CorpusInputError as exc:
        raise StageFailure("bad_input", str(exc)) from None
    ctx.inputs.extend(Path(s.path) for s in corpus.sources)
    ctx.outputs.extend(result.files.values())
    for key, value in result.counters.items():
        ctx.counters[key] = value
    for warning in result.warnings:
        ctx.note(warning)
    if result.reused:
        ctx.note("identical corpus already on disk (same corpus_hash): reused")
    if not result.counters.get("train"):
        raise StageFailure(
            "bad_input",
            "the corpus has no training rows after validation and splitting; see "
            f"{CORPUS_DIR}/manifest.json for what was read and why rows were left out",
        )
    return {"corpus_hash": result.corpus_hash, "corpus_dir": CORPUS_DIR}


def resolved_config(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    manifest = ctx.run_dir / CORPUS_DIR / "manifest.json"
    corpus_hash = json.loads(manifest.read_text()).get("corpus_hash") if manifest.exists() else None
    trainer = spec["trainer"]
    return {
        "run_id": ctx.run_id,
        "trainer": trainer,
        "config": spec[trainer],
        "contract": spec["corpus"].get("contract", "action_only"),
        "corpus_dir": str(ctx.run_dir / CORPUS_DIR),
        "corpus_hash": corpus_hash,
        "output_dir": str(ctx.run_dir / TRAINER_DIR),
        "seed": spec.get("seed", 0),
        "probe": spec.get("probe", False),
        "budget": spec.get("budget") or {},
        "model_cache": str(ctx.settings.model_cache),
    }


def prepare_config(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    config = resolved_config(ctx, spec)
    path = ctx.run_dir / RESOLVED_CONFIG
    write_json_atomic(path, config)
    ctx.outputs.append(path)
    return {"trainer": config["trainer"], "corpus_hash": config["corpus_hash"]}
