"""The `train` kind (SPEC §3.2), top to bottom: `prepare_corpus` builds the corpus,
`prepare_config` records the resolved trainer config, `launch_trainer` runs the `trm` or `qlora`
trainer and `evaluate` scores what it trained (both in the stage's child process: the scoring
itself is worker/evaluate/row_stage.py's, or worker/evaluate/puzzles.py's for trm_grid); `plan`
is its dry run.

The resolved config is computed from the run id, the settings and the spec (`resolved_config`)
by each stage that needs it. `trainer_config.resolved.json` is its record for people and is never
read back: a file in the run directory must not steer the worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.rundir import (
    CORPUS,
    CORPUS_PLAN,
    MANIFEST,
    MESSAGES,
    MESSAGES_VAL,
    TRAIN_ROWS,
    TRAINER,
    TRAINER_CONFIG,
    VAL_ROWS,
    write_json_atomic,
)
from core.schemas.corpus import CorpusSpec
from core.schemas.puzzles import PUZZLE_ARRAYS, PUZZLE_META
from core.schemas.train import QloraTrainerConfig, TrmTrainerConfig
from core.settings import Settings
from worker.context import StageContext, StageFailure
from worker.corpus import CorpusInputError, build_corpus
from worker.corpus.puzzles import build_puzzle_corpus
from worker.evaluate import row_stage
from worker.kinds.base import Kind, StageDef
from worker.models import footprint
from worker.train.callbacks import BudgetCallbacks


def corpus_sources(spec: dict[str, Any]) -> str | None:
    """The card's `data` line: the corpus's source names."""
    sources = (spec.get("corpus") or {}).get("sources") or []
    return ",".join(str(s.get("name")) for s in sources) if sources else None


# ---- prepare_corpus ----------------------------------------------------------------------------
def materialize_bench_data(spec: dict[str, Any], data_dir: Path) -> list[str]:
    """Sources under DATA_DIR/benches/<name>/ of a shipped bench are generated on first use."""
    from worker.envs.benchdata import SPEC_DIR, ensure_bench_data

    made = []
    benches = (data_dir / "benches").resolve()
    for source in spec["corpus"]["sources"]:
        if "path" not in source:  # a decision_log source reads the database
            continue
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
    out = ctx.run_dir / CORPUS
    try:
        if spec["trainer"] == "trm_grid":  # puzzle sets, not log rows (worker/corpus/puzzles.py)
            result = build_puzzle_corpus(corpus, out)
        else:  # the build reports the bytes of its sources read: `2.1 MB/2.2 MB read`
            result = build_corpus(
                corpus, out, progress=lambda done, total: ctx.progress(done, total, unit="bytes")
            )
    except CorpusInputError as exc:
        raise StageFailure("bad_input", str(exc)) from None
    # A decision_log source reads the database, not a file.
    ctx.inputs.extend(Path(s.path) for s in corpus.sources if s.type != "decision_log")
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
            f"{CORPUS}/{MANIFEST} for what was read and why rows were left out",
        )
    return {"corpus_hash": result.corpus_hash, "corpus_dir": CORPUS}


# ---- prepare_config ----------------------------------------------------------------------------
def resolved_config(run_id: str, settings: Settings, spec: dict[str, Any]) -> dict[str, Any]:
    """The trainer's config: its folders from the run directory, the rest from the spec."""
    run_dir = settings.run_dir(run_id)
    manifest = run_dir / CORPUS / MANIFEST
    corpus_hash = json.loads(manifest.read_text()).get("corpus_hash") if manifest.exists() else None
    trainer = spec["trainer"]
    return {
        "run_id": run_id,
        "trainer": trainer,
        "config": spec[trainer],
        "contract": spec["corpus"].get("contract", "action_only"),
        "corpus_dir": str(run_dir / CORPUS),
        "corpus_hash": corpus_hash,
        "output_dir": str(run_dir / TRAINER),
        "seed": spec.get("seed", 0),
        "probe": spec.get("probe", False),
        "budget": spec.get("budget") or {},
        "model_cache": str(settings.model_cache),
    }


def prepare_config(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    config = resolved_config(ctx.run_id, ctx.settings, spec)
    path = ctx.run_dir / TRAINER_CONFIG
    write_json_atomic(path, config)
    ctx.outputs.append(path)
    return {"trainer": config["trainer"], "corpus_hash": config["corpus_hash"]}


# ---- launch_trainer (SPEC §6) ------------------------------------------------------------------
# The trainer does the work; this maps what can go wrong to failure classes (SPEC §3.1) and
# retries an out-of-memory once at half the micro-batch and twice the accumulation, so the
# effective batch (and so the step count) stays the same.

# The config keys that set the micro-batch and the accumulation, per trainer (gbdt has none).
BATCH_KEYS = {"trm": ("batch_size", "grad_accum"), "qlora": ("micro_batch", "grad_accum")}
SPEC_MODELS: dict[str, type[BaseModel]] = {"trm": TrmTrainerConfig, "qlora": QloraTrainerConfig}
# The learning rate's key per trainer: a diverged run's refusal names it with its value.
LR_KNOBS = {"trm": "lr", "qlora": "lr", "gbdt": "learning_rate", "trm_grid": "lr"}
PUZZLE_FILES = (PUZZLE_META, PUZZLE_ARRAYS)
# The corpus files each trainer reads (recorded as the stage's inputs).
CORPUS_FILES = {
    "trm": (TRAIN_ROWS, VAL_ROWS),
    "gbdt": (TRAIN_ROWS, VAL_ROWS),
    "qlora": (MESSAGES, MESSAGES_VAL),
    "trm_grid": tuple(f"{split}/{name}" for split in ("train", "val") for name in PUZZLE_FILES),
}


def trainer_function(name: str) -> Callable[..., dict[str, Any]]:
    """Imported on use: qlora pulls in transformers, which a trm run never needs."""
    if name == "trm":
        from worker.train import trm

        return trm.train
    if name == "gbdt":
        from worker.train import gbdt

        return gbdt.train
    if name == "qlora":
        from worker.train import qlora

        return qlora.train
    if name == "trm_grid":
        from worker.train import trm_grid

        return trm_grid.run
    raise StageFailure(
        "bad_input", f"trainer: unknown trainer {name!r} (trm, gbdt, qlora or trm_grid)"
    )


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover - torch is a dependency of every trainer
        pass
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def launch_trainer(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    resolved = resolved_config(ctx.run_id, ctx.settings, spec)
    name = resolved["trainer"]
    train = trainer_function(name)
    corpus_dir, out_dir = Path(resolved["corpus_dir"]), Path(resolved["output_dir"])
    if not (corpus_dir / CORPUS_FILES[name][0]).exists():
        raise StageFailure(
            "bad_input",
            f"{corpus_dir / CORPUS_FILES[name][0]} is missing: the prepare_corpus stage writes it; "
            "re-run the run from the start or point corpus at a folder that has it",
        )
    config = dict(resolved["config"] or {})
    if name == "qlora":  # `auto` batch sizes become this worker's numbers before anything counts
        config["micro_batch"], config["grad_accum"] = footprint.qlora_batch_here(
            config.get("micro_batch", "auto"), config.get("grad_accum", "auto")
        )
    # Steps and memory are known once the corpus is: refuse what cannot run, before allocating.
    cost = footprint.estimate(
        name, config, corpus_dir, Path(resolved["model_cache"]), probe=bool(resolved["probe"])
    )
    ctx.note(f"estimate: {cost.describe()}")
    budget = resolved["budget"].get("max_seconds")
    footprint.check(
        cost, ctx.settings.max_steps, max_seconds=None if budget else ctx.settings.max_seconds
    )
    lr = f"{name}.{LR_KNOBS[name]}={config.get(LR_KNOBS[name])}"  # the spec's, defaults filled
    callbacks = BudgetCallbacks(
        ctx, resolved["budget"].get("max_tokens"), lr=lr, steps_formula=cost.steps_formula
    )
    batch_key, accum_key = BATCH_KEYS.get(name, ("", ""))
    if batch_key:
        defaults = SPEC_MODELS[name].model_fields
        config.setdefault(batch_key, defaults[batch_key].default)
        config.setdefault(accum_key, defaults[accum_key].default if accum_key in defaults else 1)
        ctx.counters["oom_retries"] = 0

    def run() -> dict[str, Any]:
        if batch_key:
            ctx.counters["micro_batch"] = config[batch_key]
            ctx.counters["grad_accum"] = config[accum_key]
        return train(
            config,
            corpus_dir,
            out_dir,
            callbacks,
            seed=int(resolved["seed"] or 0),
            contract=resolved["contract"],
            probe=bool(resolved["probe"]),
            model_cache=Path(resolved["model_cache"]),
        )

    try:
        result = run()
    except StageFailure:
        raise
    except Exception as exc:
        if not is_oom(exc):
            raise
        if not batch_key:  # no batches to halve (gbdt), or no accumulation to keep it (trm_grid)
            grid = name == "trm_grid"
            fix = "lower trm_grid.batch_size or hidden" if grid else "train on fewer rows"
            raise StageFailure("oom", f"{name} ran out of memory; {fix}") from None
        micro, accum = int(config[batch_key]), int(config[accum_key])
        if micro <= 1:
            raise StageFailure(
                "oom", oom_advice(name, batch_key, micro, accum, retried=False)
            ) from None
        _free_cuda_cache()
        config[batch_key], config[accum_key] = micro // 2, accum * 2
        ctx.counters["oom_retries"] = 1
        ctx.note(
            f"out of memory at {batch_key}={micro}, {accum_key}={accum}: retried once at "
            f"{batch_key}={micro // 2}, {accum_key}={accum * 2} (same effective batch)"
        )
        ctx.log("out of memory: retrying at half the micro-batch", error=str(exc)[:500])
        try:
            result = run()
        except Exception as again:
            if not is_oom(again):
                raise
            reason = oom_advice(name, batch_key, micro // 2, accum * 2, retried=True)
            raise StageFailure("oom", reason) from None

    result = json.loads(json.dumps(result, default=str))  # paths and numpy scalars as JSON
    record(ctx, result, corpus_dir, out_dir, name)
    return result


def oom_advice(name: str, batch_key: str, micro: int, accum: int, *, retried: bool) -> str:
    tried = f"{name} ran out of memory at {batch_key}={micro}, grad_accum={accum}"
    if retried:
        tried += " (the automatic retry at half the micro-batch also ran out)"
    hint = f"set {name}.{batch_key} lower in the spec (and grad_accum higher to keep the batch)"
    if name == "qlora":
        hint += ", or lower qlora.max_seq_len, or use a smaller base_model or a larger GPU"
    else:
        hint += ", or lower trm.hidden"
    return f"{tried}; {hint}"


def record(
    ctx: StageContext, result: dict[str, Any], corpus_dir: Path, out_dir: Path, name: str
) -> None:
    """Counters the runner sums into the run's usage, and the stage's inputs and outputs."""
    for key in ("rows_trained", "tokens_trained", "steps"):
        ctx.counters[key] = result.get(key) or 0
    # Where this attempt picked up (a resume after a kill, a shutdown or an OOM retry), and what
    # fitting rows into qlora's max_seq_len cost: both shown on the manifest, not buried in logs.
    for key in ("resumed_from_step", "rows_truncated", "rows_dropped"):
        if result.get(key) is not None:
            ctx.counters[key] = result[key]
    if result.get("rows_truncated") or result.get("rows_dropped"):
        data = result.get("data") or {}
        ctx.note(
            f"{result.get('rows_truncated', 0)} training rows longer than max_seq_len="
            f"{data.get('max_seq_len')} lost the beginning of their prompt and "
            f"{result.get('rows_dropped', 0)} whose answer did not fit were left out (longest "
            f"row: {(data.get('train') or {}).get('longest_tokens')} tokens); raise max_seq_len"
        )
    ctx.counters["device"] = result.get("device") or "cpu"  # type: ignore[assignment]
    vram = result.get("peak_vram_bytes")
    if vram is None and ctx.counters["device"] == "cuda":
        import torch

        vram = torch.cuda.max_memory_allocated()
    if vram is not None:
        ctx.counters["peak_vram_bytes"] = int(vram)
    if result.get("stopped_by"):
        ctx.note(f"training stopped by {result['stopped_by']} at step {result.get('steps')}")
    if result.get("resumed_from_step") is not None:
        ctx.note(f"resumed from the checkpoint at step {result['resumed_from_step']}")
    ctx.inputs.extend(p for f in CORPUS_FILES[name] if (p := corpus_dir / f).exists())
    ctx.outputs.extend(sorted(p for p in out_dir.rglob("*") if p.is_file()))


def _free_cuda_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass


# ---- evaluate (SPEC §7) ------------------------------------------------------------------------
def evaluate(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    """The trained model on the corpus's train sample and anchors (worker/evaluate/anchors.py,
    through worker/evaluate/row_stage.py): writes scorecard.json and samples.jsonl (one row per
    anchor example)."""
    resolved = resolved_config(ctx.run_id, ctx.settings, spec)
    if resolved["trainer"] == "trm_grid":  # whole answers on held-out puzzles
        from worker.evaluate.puzzles import evaluate_stage

        return evaluate_stage(ctx, spec, resolved)
    return row_stage.evaluate_stage(ctx, spec, resolved)


# ---- the dry run (SPEC §3.2) -------------------------------------------------------------------
def _plan_corpus(ctx: StageContext, spec: dict[str, Any]) -> tuple[str, int]:
    """Read and validate every source as the real build would, without writing the corpus;
    the manifest it would write goes to `corpus.plan.json`."""
    build = build_puzzle_corpus if spec["trainer"] == "trm_grid" else build_corpus
    try:
        result = build(
            CorpusSpec.model_validate(spec["corpus"]), ctx.run_dir / CORPUS, dry_run=True
        )
    except CorpusInputError as exc:
        raise StageFailure("bad_input", str(exc)) from None
    write_json_atomic(ctx.run_dir / CORPUS_PLAN, result.manifest)
    c = result.counters
    return (
        f"would read {c.get('rows_read', 0)} rows: keep {c.get('rows_kept', 0)}, "
        f"{c.get('rows_invalid', 0)} invalid, {c.get('duplicates', 0)} duplicates; "
        f"train/val/anchor/critic {c.get('train', 0)}/{c.get('val', 0)}/{c.get('anchor', 0)}/"
        f"{c.get('critic', 0)}; corpus_hash {result.corpus_hash[:12]} (see {CORPUS_PLAN})"
    ), int(c.get("train", 0))


def plan(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    """Resolve and validate everything, write the resolved config, train nothing."""
    materialize_bench_data(spec, ctx.settings.data_dir)
    corpus_note, train_rows = _plan_corpus(ctx, spec)
    trainer = spec["trainer"]
    resolved = {
        "run_id": ctx.run_id,
        "trainer": trainer,
        "trainer_config": spec[trainer],
        "corpus": spec["corpus"],
        "budget": spec.get("budget"),
        "seed": spec.get("seed"),
        "dry_run": True,
        "stages": [s.name for s in STAGES],
    }
    write_json_atomic(ctx.run_dir / TRAINER_CONFIG, resolved)
    return {
        "prepare_corpus": corpus_note,
        "prepare_config": f"resolved config written to {TRAINER_CONFIG}",
        "launch_trainer": f"would train a {trainer} model{_planned_steps(ctx, spec, train_rows)}",
        "evaluate": "would score train and anchor splits",
    }


def _planned_steps(ctx: StageContext, spec: dict[str, Any], rows: int) -> str:
    """The dry run's step count (the memory estimate needs the written corpus: the real run
    notes it on launch_trainer's manifest before training)."""
    planned = footprint.planned_steps(spec["trainer"], spec[spec["trainer"]], rows)
    if planned is None:
        return "; steps and memory are estimated before training"
    steps, formula = planned
    over = ctx.settings.max_steps
    verdict = f", OVER this server's limit of {over} (TRM_MAX_STEPS)" if steps > over else ""
    return f": {steps} steps ({formula}){verdict}; memory is estimated before training"


STAGES = (
    StageDef("prepare_corpus", prepare_corpus),
    StageDef("prepare_config", prepare_config, weight=0.2),
    StageDef("launch_trainer", launch_trainer, in_child=True, weight=8),
    StageDef("evaluate", evaluate, in_child=True, weight=2),
)


def train_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json's `top_features`, when the trainer lists them (gbdt: its features of most
    gain, each `{feature, gain, meaning}`, the meaning in words from explain()), read from
    launch_trainer's manifest, where the trainer's result is kept."""
    try:
        manifest = json.loads((run_dir / "launch_trainer" / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    top = (manifest.get("result") or {}).get("top_features") if isinstance(manifest, dict) else None
    return {"top_features": top} if isinstance(top, list) and top else {}


KIND = Kind("train", STAGES, plan, data_source=corpus_sources, summary=train_summary)
