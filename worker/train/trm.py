"""The `trm` trainer (SPEC §6): a tiny recursive model trained from scratch on normalized rows.

Read top to bottom: config, one deeply supervised batch, accuracy, `train()`. The model, its
recursion and its files are `worker/models/trm.py`; this file is the data order, the loop, model
selection and checkpoints.

- **Deep supervision**: each batch runs up to `supervision_steps` steps; every step is one deep
  recursion from the previous step's detached (y, z), its own loss (cross-entropy over the row's
  candidates, plus the halting head's binary cross-entropy on "is the answer right") and its own
  optimizer update.
- **Model selection on val**: the weights are averaged as training goes (the paper's EMA);
  after every epoch the average's val accuracy (with halting, as the policy answers; ties go
  to the lower val loss), or its val loss or ranking AUC (`select_by`); the best epoch's average
  is kept and written, and training stops after `patience` epochs without a better one. The
  anchors are never looked at. With a text part, loss and auc weigh the part alone first.
- **Checkpoints** (`checkpoints/step-NNNNNN/`: the current, averaged and best weights, the
  features, the optimizer, the RNG) every `checkpoint_every` batches and on a stop; `train()`
  resumes from the newest. The data order is a function of (seed, epoch), so a resumed run takes
  the same batches as an uninterrupted one.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from core.rundir import FEATURES, TRAIN_ROWS, TRM_BEST, TRM_CONFIG, TRM_MODEL, VAL_ROWS
from core.schemas.train import TrmTrainerConfig
from worker.context import StageFailure
from worker.features.wide import reading_of
from worker.models.encoding import BLOCKS
from worker.models.feature_space import FeatureSpace
from worker.models.rows import read_rows
from worker.models.trm import (
    Encoded,
    TinyRecursiveModel,
    build,
    save_model,
    wide_buckets,
    wide_input,
)
from worker.train import checkpoints, trm_screen, trm_wide
from worker.train.callbacks import TrainerCallbacks
from worker.train.memory import Rss, peak_vram, reset_peak_vram

# The spec's defaults; `seed` is accepted and recorded, the run's seed wins.
DEFAULTS: dict[str, Any] = {**TrmTrainerConfig().model_dump(), "seed": 0}
EMA_WEIGHTS = "ema.safetensors"  # in a trm checkpoint: the running average of the weights
EMA_DECAY = 0.98  # per batch: the average spans about two epochs of a few hundred rows
EMA_SPAN = round(1 / (1 - EMA_DECAY))  # batches the average mostly spans (50)
# Keys that may change between attempts without invalidating a checkpoint (the OOM retry).
RESUMABLE_CHANGES = ("batch_size", "grad_accum", "checkpoint_every")


def drop_features(x: torch.Tensor, rate: float) -> torch.Tensor:
    """`x` (rows, candidates, BLOCKS * features: values, presence flags, sign flags) with each
    feature removed from a row (its value and its flags, for every candidate) at `rate`: a row
    as an unseen world shows it, without some of what the train worlds had, so that no single
    feature carries the answer alone."""
    if rate <= 0:
        return x
    width = x.shape[-1] // BLOCKS
    keep = (torch.rand(x.shape[0], 1, width, device=x.device) >= rate).to(x.dtype)
    return x * torch.cat([keep] * BLOCKS, -1)


def supervised_batch(
    model: TinyRecursiveModel,
    chunks: list[dict[str, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    steps: int,
    halt_weight: float,
    feature_dropout: float = 0.0,
) -> float:
    """Deep supervision over one batch (split in `chunks` for the accumulation): `steps`
    updates, each from the last one's detached carry. The mean loss of the last step."""
    rows = sum(len(c["target"]) for c in chunks)
    carries: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(chunks)
    inputs = [drop_features(b["x"], feature_dropout) for b in chunks]
    last = 0.0
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        last = 0.0
        for j, b in enumerate(chunks):
            x = model.embed(inputs[j])
            y, z = carries[j] or model.start(x)
            y, z, scores, q = model.deep_recursion(x, y, z, b["mask"], wide_input(model, b))
            right = (scores.argmax(-1) == b["target"]).float()
            loss = F.cross_entropy(scores, b["target"], reduction="sum")
            loss = loss + halt_weight * F.binary_cross_entropy_with_logits(
                q, right, reduction="sum"
            )
            (loss / rows).backward()
            carries[j] = (y.detach(), z.detach())
            last += float(loss.detach()) / rows
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return last


class Ema:
    """The paper's exponential moving average of the weights: what is evaluated on val and
    kept. One seed's lucky or unlucky last batches move it little, so the epoch chosen on val
    (and the anchor score) varies less between seeds. The decay ramps up from 0 over the first
    updates, so a short run is not stuck near its initialization."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay, self.updates = decay, 0
        self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for k, v in model.state_dict().items():
            self.weights[k].lerp_(v.detach(), 1 - decay)


@dataclass
class ValScore:
    """One pass over val rows as the policy answers (halting included): top-1 accuracy, mean
    cross-entropy, and the ranking AUC (`ranking_auc`; None where no candidate is ever wrong)."""

    accuracy: float
    loss: float
    auc: float | None


def ranking_auc(
    tools: list[list[str]], targets: list[int], scores: list[list[float]]
) -> float | None:
    """Per row, the share of the labelled candidate's wrong instances (the same candidate in the
    rows where it is not the answer) that its score, as a row's log-probability, outscores (ties
    half); the mean over rows. A pairwise AUC across rows: for two candidates (a router's weak
    and strong) it is the ROC AUC of the strong candidate's score, what a threshold sweep sees.
    Rows whose candidate is never wrong elsewhere are left out; None when that is all of them."""
    offered: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for names, target, row in zip(tools, targets, scores, strict=True):
        for j, name in enumerate(names):
            offered[name].append((row[j], j == target))
    shares: list[np.ndarray] = []
    for seen in offered.values():
        wrong = np.sort(np.array([s for s, right in seen if not right]))
        right = np.array([s for s, ok in seen if ok])
        if not len(wrong) or not len(right):
            continue
        below = np.searchsorted(wrong, right, "left")
        ties = np.searchsorted(wrong, right, "right") - below
        shares.append((below + ties / 2) / len(wrong))
    return float(np.concatenate(shares).mean()) if shares else None


@torch.no_grad()
def evaluate(
    model: TinyRecursiveModel,
    data: Encoded,
    steps: int,
    device: torch.device,
    progress: Callable[[int, int], None] | None = None,
) -> ValScore:
    """`data` scored as the policy answers (halting included); `progress(rows done, rows)` from
    0 to the end."""
    if not len(data):
        return ValScore(0.0, 0.0, None)
    model.eval()
    right, loss = 0, 0.0
    logps: list[list[float]] = []
    for start in range(0, len(data), 256):
        if progress:
            progress(start, len(data))
        b = data.batch(torch.arange(start, min(start + 256, len(data))), device)
        scores = model.infer(b["x"], b["mask"], steps, wide_input(model, b))
        right += int((scores.argmax(-1) == b["target"]).sum())
        loss += float(F.cross_entropy(scores, b["target"], reduction="sum"))
        logps += scores.log_softmax(-1).cpu().tolist()
    if progress:
        progress(len(data), len(data))
    model.train()
    tools = [list(r["tools"]) for r in data.rows]
    targets = [int(t) for t in data.target]
    auc = ranking_auc(tools, targets, [p[: len(t)] for p, t in zip(logps, tools, strict=True)])
    return ValScore(right / len(data), loss / len(data), auc)


def accuracy(
    model: TinyRecursiveModel,
    data: Encoded,
    steps: int,
    device: torch.device,
    progress: Callable[[int, int], None] | None = None,
) -> float:
    return evaluate(model, data, steps, device, progress).accuracy


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
    """Train on `corpus_dir/train.jsonl`, select on `val.jsonl`; write model.safetensors,
    config.json and features.json (the best epoch's). `seed` (the run's) drives init and data
    order; `contract` and `model_cache` are unused (the trainers share one signature). `probe`
    runs exactly one batch end to end."""
    threads = torch.get_num_threads()
    # A model this small runs faster on one CPU thread than on a busy many.
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
    rows = read_rows(corpus_dir / TRAIN_ROWS)
    if not rows:
        raise StageFailure(
            "bad_input",
            f"{corpus_dir / TRAIN_ROWS} has no rows: check the corpus sources and "
            "corpus/manifest.json (rows left out and why)",
        )
    val_rows = read_rows(corpus_dir / VAL_ROWS)
    fingerprint = checkpoints.fingerprint(
        {**cfg, "seed": seed}, RESUMABLE_CHANGES, [corpus_dir / TRAIN_ROWS, corpus_dir / VAL_ROWS]
    )
    resume = None if probe else checkpoints.resume_point(out_dir, fingerprint, callbacks.trusts)
    # Without grid cells crossed with the candidate: the model reads the whole row at once.
    if resume:
        space = FeatureSpace.load(resume / FEATURES)
        saved = json.loads((resume / TRM_CONFIG).read_text())
        fitted = int(saved.get("features_screened_from") or len(space.names))
        top = list(saved.get("top_features") or [])
    else:
        # The columns a quick tree ranker finds worth a split (worker/train/trm_screen.py).
        screen = trm_screen.screened(
            FeatureSpace.fit(rows, crossed_cells=False, text_encoder=cfg["text_encoder"]),
            rows,
            val_rows,
            int(cfg["screen"]),
            seed,
        )
        space, fitted, top = screen.space, screen.fitted, screen.top
    buckets, reading = wide_buckets(cfg), reading_of(cfg)
    data = Encoded(space, rows, buckets, reading)
    val = Encoded(space, val_rows, buckets, reading)

    micro, accum = int(cfg["batch_size"]), 1 if probe else int(cfg["grad_accum"])
    per_step = micro * accum  # the effective batch: the OOM retry keeps it
    steps_per_epoch = math.ceil(len(data) / per_step)
    total = 1 if probe else cfg["max_steps"] or int(cfg["epochs"]) * steps_per_epoch
    sup = 1 if probe else int(cfg["supervision_steps"])
    meta: dict[str, Any] = {
        "config": cfg,
        "seed": seed,
        "total_steps": total,
        "features": len(space.names),
        "features_screened_from": fitted,
        "top_features": top,
    }

    torch.manual_seed(seed)
    model = build(space, cfg).to(device)
    if buckets:
        # The linear text part, fitted before the network (worker/train/trm_wide.py): the
        # train rows carry its out-of-fold logits, val and later rows its own.
        weights, data.wide_override = trm_wide.fit_with_out_of_fold(
            data.terms,
            [int(t) for t in data.target],
            [str(r.get("env") or "") for r in rows],
            float(cfg["wide"]),
            buckets,
        )
        with torch.no_grad():
            model.wide.copy_(torch.from_numpy(weights).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    ema = Ema(model, EMA_DECAY)
    step, last_loss, stopped_by = 0, None, None
    best: dict[str, Any] = {"accuracy": -1.0, "epoch": None, "since": 0, "state": None}
    if resume:  # the weights, optimizer, RNG and the best epoch as they were at its step
        model.load_state_dict(load_file(resume / TRM_MODEL, device=str(device)))
        state = checkpoints.load(resume, optimizer)
        step, last_loss = int(state["step"]), state.get("loss")
        best.update(state.get("best") or {})
        ema.updates = int(state.get("ema_updates") or 0)
        if (resume / EMA_WEIGHTS).is_file():
            ema.weights = load_file(resume / EMA_WEIGHTS, device=str(device))
        if (resume / TRM_BEST).is_file():
            best["state"] = load_file(resume / TRM_BEST, device=str(device))
    resumed_from = step if resume else None
    if buckets and not resume and len(val) and cfg["select_by"] in ("loss", "auc"):
        # The text part alone is the first candidate: the network is kept only where it beats it.
        start = Ema(model, EMA_DECAY)
        start.weights = trm_wide.alone(start.weights)
        _select(model, start, val, sup, device, best, -1, callbacks, 0, cfg["select_by"])

    warm = max(1, total // 20)  # batches of the learning rate's linear warmup

    def lr_at(s: int) -> float:  # linear warmup, cosine down to a tenth
        if s < warm:
            return float(cfg["lr"]) * (s + 1) / warm
        return float(cfg["lr"]) * (
            0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm)))
        )

    def checkpoint(at: int) -> None:
        def write(folder: Path) -> None:
            save_model(folder, model, space, meta)
            if best["state"] is not None:
                save_file(best["state"], str(folder / TRM_BEST))
            save_file(ema.weights, str(folder / EMA_WEIGHTS))

        kept = {k: v for k, v in best.items() if k != "state"}
        extra = {
            "loss": last_loss,
            "fingerprint": fingerprint,
            "best": kept,
            "ema_updates": ema.updates,
        }
        path = checkpoints.save(out_dir, at, write, optimizer, None, extra)
        callbacks.on_checkpoint(at, path)

    # Val selection waits until the averaged weights are mostly past the warmup: val worlds
    # unlike the anchors would otherwise keep a barely trained model (the constant answer).
    first_kept = warm + EMA_SPAN if cfg["select_after_warmup"] else 0
    reset_peak_vram()
    rss = Rss()
    rows_done = candidates_done = 0
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
        chunks = [data.batch(chunk, device) for chunk in idx.split(micro)]
        last_loss = supervised_batch(
            model, chunks, optimizer, sup, float(cfg["halt_weight"]), float(cfg["feature_dropout"])
        )
        ema.update(model)
        rss.sample()
        step += 1
        rows_done += len(idx)
        candidates_done += data.candidates(idx)
        rate = candidates_done / max(time.perf_counter() - started, 1e-9)
        callbacks.on_step(
            step,
            total,
            loss=round(last_loss, 5),
            lr=lr_at(step - 1),
            tokens_per_s=round(rate, 1),
            tokens_trained=candidates_done,
        )
        epoch_end = step % steps_per_epoch == 0 or step == total
        since = 0
        if epoch_end and (step >= first_kept or step == total):
            since = _select(
                model, ema, val, sup, device, best, epoch, callbacks, step, cfg["select_by"]
            )
        if since >= cfg["patience"]:
            break  # early stopping: no better val figure for `patience` epochs
        if not probe and step % int(cfg["checkpoint_every"]) == 0 and step < total:
            checkpoint(step)
    if not probe:
        checkpoint(step)  # on a stop, and at the end: a re-run resumes instead of retraining
    model.load_state_dict(best["state"] if best["state"] is not None else ema.weights)
    eval_pass = partial(callbacks.on_pass, "eval")  # the card shows `eval rows/rows`
    metrics = {
        "val_accuracy": accuracy(model, val, sup, device, eval_pass) if len(val) else None,
        "train_accuracy": accuracy(model, data, sup, device, eval_pass),
    }
    meta.update(steps=step, final_loss=last_loss, best_epoch=best["epoch"], eval=metrics)
    artifacts = save_model(out_dir, model, space, meta)
    return {
        "trainer": "trm",
        "steps": step,
        "total_steps": total,
        "final_loss": last_loss,
        "rows_trained": rows_done,
        "tokens_trained": candidates_done,
        "stopped_by": stopped_by,
        "best_epoch": best["epoch"],
        "early_stopped": step < total and stopped_by is None,
        "features": len(space.names),
        "features_screened_from": fitted,
        "top_features": top,
        "artifacts": [str(p) for p in artifacts],
        "resumed_from_step": resumed_from,
        "device": device.type,
        "peak_vram_bytes": peak_vram(),
        "peak_rss_bytes": rss.peak,
        "micro_batch": micro,
        "grad_accum": accum,
        "train_seconds": round(time.perf_counter() - started, 3),
        "eval": {k: (round(v, 4) if v is not None else None) for k, v in metrics.items()},
    }


def _select(
    model: TinyRecursiveModel,
    ema: Ema,
    val: Encoded,
    steps: int,
    device: torch.device,
    best: dict[str, Any],
    epoch: int,
    callbacks: TrainerCallbacks,
    step: int,
    select_by: str = "accuracy",
) -> int:
    """End of an epoch: keep the averaged weights when their val figure beats the best so far.
    `select_by="accuracy"`: the higher val accuracy, or the same at a lower val loss (a few
    hundred val rows make accuracy coarse: ties are common, and the first of them is often an
    undertrained epoch); while the val accuracy has not moved since the first epoch (and is
    below 1), the latest epoch is kept and training goes on. `"accuracy_1se"`: the latest epoch
    whose val accuracy is within one binomial standard error of the best so far (epochs since
    then count towards `patience`). `"loss"`: the lower val loss.
    `"auc"`: the higher ranking AUC (`ranking_auc`), ties to the lower loss; by accuracy where
    the AUC has no pairs. With no val split every epoch is kept: the last one wins. Epochs since
    the best."""
    training = copy.deepcopy({k: v.detach() for k, v in model.state_dict().items()})
    model.load_state_dict(ema.weights)
    eval_pass = partial(callbacks.on_pass, "eval")
    got = evaluate(model, val, steps, device, eval_pass) if len(val) else None
    model.load_state_dict(training)
    score, loss = (got.accuracy, got.loss) if got else (None, None)
    auc = got.auc if got else None
    callbacks.on_eval(step, epoch=epoch, val_accuracy=score, val_loss=loss, val_auc=auc)
    lower = loss is not None and loss < (best.get("loss") or math.inf)
    if select_by == "loss" and loss is not None:
        better = lower
    elif select_by == "accuracy_1se" and score is not None:
        # The latest epoch within one binomial standard error of the best val accuracy so far:
        # a val split too small to tell close epochs apart keeps the more trained one.
        peak = best["peak"] = max(float(best.get("peak", -1.0)), score)
        better = score >= peak - math.sqrt(peak * (1.0 - peak) / len(val))
    elif select_by == "auc" and auc is not None:
        top = best.get("auc")
        better = top is None or auc > top or (auc == top and lower)
    else:
        better = score is None or score > best["accuracy"] or (score == best["accuracy"] and lower)
        # A val split whose accuracy has not moved since the first epoch (and is not perfect)
        # cannot tell the epochs apart: val worlds unlike the train ones, answered alike by
        # every epoch. It neither keeps the first, barely trained epoch (the lowest val loss of
        # a model not yet sure of anything) nor stops training: the latest epoch is kept until
        # the figure moves.
        flat = best.get("flat", True) and (best["epoch"] is None or score == best["accuracy"])
        best["flat"] = flat
        better = better or (flat and score is not None and score < 1.0)
    if better:
        kept = score if score is not None else -1.0
        best.update(accuracy=kept, loss=loss, auc=auc, epoch=epoch, since=0)
        best["state"] = {k: v.clone() for k, v in ema.weights.items()}
    else:
        best["since"] += 1
    return int(best["since"])
