"""The `trm` trainer (SPEC §6): a tiny recursive model trained from scratch on normalized rows.

Read top to bottom: config, loss and eval, `train()`. The model, its tokenizer and its files are in
`worker/models/trm.py`; this file is the data order, the loop and its checkpoints.

- Every recursion scores the candidates and is supervised (deep supervision), so later
  recursions learn to correct earlier ones. Padding candidates score -inf: the cross-entropy is
  over each row's own candidates.
- Checkpoints (`checkpoints/step-NNNNNN/`: model, vocabulary, optimizer, step, RNG; written
  atomically by `checkpoints.py`, shared with `qlora`) every `checkpoint_every` steps and on a
  stop; `train()` resumes from the newest one. The data order is a function of (seed, epoch), so
  a resumed run takes the same batches as an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from core.rundir import TRM_MODEL, TRM_VOCAB
from core.schemas.train import TrmTrainerConfig
from worker.context import StageFailure
from worker.models.trm import (
    Encoded,
    TinyRecursiveModel,
    Tokenizer,
    read_rows,
    save_model,
)
from worker.train import checkpoints
from worker.train.callbacks import TrainerCallbacks
from worker.train.memory import Rss, peak_vram, reset_peak_vram

# The spec's defaults; `seed` is accepted and recorded, the run's seed wins.
DEFAULTS: dict[str, Any] = {**TrmTrainerConfig().model_dump(), "seed": 0}
# Keys that may change between attempts without invalidating a checkpoint (the OOM retry).
RESUMABLE_CHANGES = ("batch_size", "grad_accum", "checkpoint_every")
EVAL_SPLITS = ("val", "anchor")


def deep_supervision_loss(outs: list[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Summed (not averaged) over rows: callers divide by the rows of the optimizer step."""
    total = sum(F.cross_entropy(o, target, reduction="sum") for o in outs)
    return cast(torch.Tensor, total) / len(outs)


@torch.no_grad()
def evaluate(model: TinyRecursiveModel, data: Encoded, device: torch.device) -> dict[str, float]:
    model.eval()
    correct, loss = 0, 0.0
    for start in range(0, len(data), 256):
        idx = torch.arange(start, min(start + 256, len(data)))
        b = data.batch(idx, device)
        final = model(b)[-1]
        loss += float(F.cross_entropy(final, b["target"], reduction="sum"))
        correct += int((final.argmax(-1) == b["target"]).sum())
    model.train()
    majority = Counter(data.actions).most_common(1)[0][1] / len(data)
    return {"accuracy": correct / len(data), "loss": loss / len(data), "majority": majority}


# ---- training ----------------------------------------------------------------------------------
def train(
    config: dict[str, Any],
    corpus_dir: Path,
    out_dir: Path,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    contract: str = "action_only",
    probe: bool = False,
    model_cache: Path | None = None,
) -> dict[str, Any]:
    """Train on `corpus_dir/train.jsonl`; write model.safetensors, config.json, vocab.json.

    `seed` (the run's) drives init and data order; `contract` and `model_cache` are unused here
    (same signature as the other trainers). `probe` runs exactly one batch end to end.
    """
    threads = torch.get_num_threads()
    # A model this small runs several times faster on one CPU thread than on a busy many.
    if not torch.cuda.is_available() and int(config.get("hidden") or 64) <= 256:
        torch.set_num_threads(1)
    try:
        return _train(config, Path(corpus_dir), Path(out_dir), callbacks, seed=seed, probe=probe)
    finally:
        torch.set_num_threads(threads)


def _train(
    config: dict[str, Any],
    corpus_dir: Path,
    out_dir: Path,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    probe: bool,
) -> dict[str, Any]:
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise StageFailure("bad_input", f"trm config: unknown key {unknown[0]!r}")
    cfg = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None or k == "max_steps"}}
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = read_rows(corpus_dir / "train.jsonl")
    if not rows:
        raise StageFailure(
            "bad_input", f"{corpus_dir / 'train.jsonl'} has no rows: check the corpus sources and "
            "corpus/manifest.json (rows left out and why)",
        )  # fmt: skip
    fingerprint = checkpoints.fingerprint(
        {**cfg, "seed": seed}, RESUMABLE_CHANGES, [corpus_dir / "train.jsonl"]
    )
    resume = None if probe else checkpoints.resume_point(out_dir, fingerprint)
    tok = Tokenizer.load(resume / TRM_VOCAB) if resume else Tokenizer.build(rows)
    data = Encoded(tok, rows)
    evals = {s: Encoded(tok, r) for s in EVAL_SPLITS if (r := read_rows(corpus_dir / f"{s}.jsonl"))}

    micro, accum = int(cfg["batch_size"]), 1 if probe else int(cfg["grad_accum"])
    per_step = micro * accum  # the effective batch: the OOM retry keeps it
    steps_per_epoch = math.ceil(len(data) / per_step)
    total = 1 if probe else cfg["max_steps"] or int(cfg["epochs"]) * steps_per_epoch
    meta = {
        "format": "trm-v1", "vocab_size": len(tok.tokens), "hidden": cfg["hidden"],
        "n_recursions": cfg["n_recursions"], "config": cfg, "seed": seed, "total_steps": total,
    }  # fmt: skip

    torch.manual_seed(seed)
    model = TinyRecursiveModel(len(tok.tokens), cfg["hidden"], cfg["n_recursions"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    step, last_loss, stopped_by = 0, None, None
    if resume:  # the weights, optimizer and RNG as they were at its step
        model.load_state_dict(load_file(resume / TRM_MODEL, device=str(device)))
        state = checkpoints.load(resume, optimizer)
        step, last_loss = int(state["step"]), state.get("loss")
    resumed_from = step if resume else None

    def lr_at(s: int) -> float:  # linear warmup, cosine down to a tenth
        warm = max(1, total // 20)
        if s < warm:
            return cfg["lr"] * (s + 1) / warm
        return cfg["lr"] * (
            0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm)))
        )

    def checkpoint(at: int) -> None:
        weights = partial(save_model, model=model, tok=tok, meta=meta)
        state = {"loss": last_loss, "fingerprint": fingerprint}
        path = checkpoints.save(out_dir, at, weights, optimizer, None, state)
        callbacks.on_checkpoint(at, path)

    reset_peak_vram()
    rss = Rss()
    rows_done = tokens_done = 0
    started = time.perf_counter()
    model.train()
    while step < total:
        if (stopped_by := callbacks.should_stop()) is not None:
            break
        epoch, i = divmod(step, steps_per_epoch)
        shuffle = torch.Generator().manual_seed(seed * 7919 + epoch)
        order = torch.randperm(len(data), generator=shuffle)
        idx = order[i * per_step : (i + 1) * per_step]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for chunk in idx.split(micro):
            b = data.batch(chunk, device)
            loss = deep_supervision_loss(model(b), b["target"]) / len(idx)
            loss.backward()
            step_loss += float(loss.detach())
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rss.sample()
        step, last_loss = step + 1, step_loss
        rows_done += len(idx)
        tokens_done += int(data.tokens[idx].sum())
        rate = tokens_done / max(time.perf_counter() - started, 1e-9)
        callbacks.on_step(step, total, loss=round(step_loss, 5), lr=lr_at(step - 1),
                          tokens_per_s=round(rate, 1), tokens_trained=tokens_done)  # fmt: skip
        if step % steps_per_epoch == 0 or step == total:
            for split, split_data in evals.items():
                res = evaluate(model, split_data, device)
                callbacks.on_eval(step, **{f"{split}_{k}": round(v, 4) for k, v in res.items()})
        if not probe and step % int(cfg["checkpoint_every"]) == 0 and step < total:
            checkpoint(step)
    if not probe:
        checkpoint(step)  # on a stop, and at the end: a re-run resumes instead of retraining

    metrics = {s: evaluate(model, d, device) for s, d in evals.items()}
    meta.update(steps=step, final_loss=last_loss, eval=metrics)
    artifacts = save_model(out_dir, model, tok, meta)
    return {
        "trainer": "trm",
        "steps": step,
        "total_steps": total,
        "final_loss": last_loss,
        "rows_trained": rows_done,
        "tokens_trained": tokens_done,
        "stopped_by": stopped_by,
        "artifacts": [str(p) for p in artifacts],
        "resumed_from_step": resumed_from,
        "device": device.type,
        "peak_vram_bytes": peak_vram(),
        "peak_rss_bytes": rss.peak,
        "micro_batch": micro,
        "grad_accum": accum,
        "train_seconds": round(time.perf_counter() - started, 3),
        "eval": {s: {k: round(v, 4) for k, v in m.items()} for s, m in metrics.items()},
    }
