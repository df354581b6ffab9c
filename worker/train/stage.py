"""The `launch_trainer` stage (SPEC §6): read the resolved config, run its trainer, report.

It runs in the stage's child process. The trainer does the work; this file maps what can go wrong
to failure classes (SPEC §3.1) and retries an out-of-memory once at half the micro-batch and twice
the accumulation, so the effective batch (and so the step count) stays the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.schemas.train import QloraTrainerConfig, TrmTrainerConfig
from worker.context import StageContext, StageFailure
from worker.train.callbacks import StageCallbacks

RESOLVED_CONFIG = "trainer_config.resolved.json"
# The config keys that set the micro-batch and the accumulation, per trainer.
BATCH_KEYS = {"trm": ("batch_size", "grad_accum"), "qlora": ("micro_batch", "grad_accum")}
SPEC_MODELS: dict[str, type[BaseModel]] = {"trm": TrmTrainerConfig, "qlora": QloraTrainerConfig}
# The corpus files each trainer reads (recorded as the stage's inputs).
CORPUS_FILES = {
    "trm": ("train.jsonl", "val.jsonl", "anchor.jsonl"),
    "qlora": ("messages.jsonl", "messages_val.jsonl"),
}


class BudgetCallbacks(StageCallbacks):
    """Stage callbacks that also stop at the spec's `max_tokens` (the trainer reports its running
    `tokens_trained` with each step); `max_seconds` is the context's deadline."""

    def __init__(self, ctx: StageContext, max_tokens: int | None) -> None:
        super().__init__(ctx)
        self.max_tokens, self.tokens = max_tokens, 0

    def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
        self.tokens = int(metrics.get("tokens_trained", self.tokens))
        super().on_step(step, total, **metrics)

    def should_stop(self) -> str | None:
        if self.max_tokens and self.tokens >= self.max_tokens:
            return "budget"
        return super().should_stop()


def trainer_function(name: str) -> Callable[..., dict[str, Any]]:
    """Imported on use: qlora pulls in transformers, which a trm run never needs."""
    if name == "trm":
        from worker.train import trm

        return trm.train
    if name == "qlora":
        from worker.train import qlora

        return qlora.train
    raise StageFailure("bad_input", f"trainer: unknown trainer {name!r} (trm or qlora)")


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
    resolved = json.loads((ctx.run_dir / RESOLVED_CONFIG).read_text())
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
    batch_key, accum_key = BATCH_KEYS[name]
    defaults = SPEC_MODELS[name].model_fields
    config.setdefault(batch_key, defaults[batch_key].default)
    config.setdefault(accum_key, defaults[accum_key].default if accum_key in defaults else 1)
    callbacks = BudgetCallbacks(ctx, (resolved.get("budget") or {}).get("max_tokens"))
    ctx.counters["oom_retries"] = 0

    def run() -> dict[str, Any]:
        ctx.counters["micro_batch"], ctx.counters["grad_accum"] = (
            config[batch_key],
            config[accum_key],
        )
        return train(
            config,
            corpus_dir,
            out_dir,
            callbacks,
            seed=int(resolved.get("seed") or 0),
            contract=resolved.get("contract", "action_only"),
            probe=bool(resolved.get("probe")),
            model_cache=Path(resolved.get("model_cache") or ctx.settings.model_cache),
        )

    try:
        result = run()
    except StageFailure:
        raise
    except Exception as exc:
        if not is_oom(exc):
            raise
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
