"""Training the whole-answer trm (worker/models/trm_grid.py) on a puzzle set, as the paper does.

Read top to bottom: scoring, the carry of puzzles in flight, `train()`.

- **Deep supervision over a carry**: the batch is `batch_size` slots, each a puzzle in flight
  with its (y, z). Every optimizer step runs one deep recursion for every slot from its detached
  carry, takes the loss (cross-entropy over the cells, plus the halting head's binary
  cross-entropy on "is the whole answer right") and updates. A slot whose puzzle has had
  `supervision_steps` steps, or whose halting logit is > 0 (after its exploration minimum: a
  `halt_exploration` share of puzzles must first run a random 2..N_sup steps), takes a fresh
  puzzle with a fresh carry. So a puzzle gets up to N_sup updates, and easy ones free their
  slot early.
- **Data**: fresh puzzles are drawn from the train set with a random answer-keeping
  augmentation each (`augment`), so a small set is seen in many forms.
- **EMA and selection**: the weights are averaged (`ema_decay`); every `eval_every` steps the
  average is scored on `eval_puzzles` val puzzles (all N_sup steps, as the paper evaluates) and
  the best is kept. `callbacks.on_eval` gets each point: the learning curve.
- **Stop**: `max_steps`, `callbacks.should_stop()` (cancel, budget) or `max_seconds` here
  (wall time, the val points included: `eval_seconds` says how much of it they took).
- **In the service**: `run()` is the `trm_grid` trainer of a train run's launch_trainer stage
  (worker/kinds/train.py), with the signature every trainer shares: the corpus's puzzle sets
  in (worker/corpus/puzzles.py), the model, its checkpoints and the learning curve out.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from core.rundir import TRM_MODEL
from core.schemas.puzzles import GridTrainerConfig
from worker.context import StageFailure
from worker.models.trm_grid import GridTRM, save_model
from worker.puzzles import PuzzleSet
from worker.train import checkpoints
from worker.train.callbacks import TrainerCallbacks
from worker.train.memory import Rss, peak_vram, reset_peak_vram
from worker.train.trm import Ema

EVAL_BATCH = 256


@dataclass(frozen=True, slots=True)
class Score:
    """Whole answers right, cells right among those the puzzle leaves open (token 0: a sudoku's
    blanks, a maze's open cells), and the mean supervision steps used."""

    exact: float
    cells: float
    steps: float
    puzzles: int


@torch.no_grad()
def outcomes(model: GridTRM, puzzles: PuzzleSet, halting: bool = False) -> dict[str, np.ndarray]:
    """Per puzzle: whole answer right, open cells right, open cells, supervision steps used."""
    model.eval()
    device = model.y0.device
    parts: dict[str, list[np.ndarray]] = {"exact": [], "right": [], "open": [], "steps": []}
    for start in range(0, len(puzzles), EVAL_BATCH):
        grid = torch.from_numpy(puzzles.inputs[start : start + EVAL_BATCH]).to(device)
        label = torch.from_numpy(puzzles.labels[start : start + EVAL_BATCH]).to(device)
        answer, used = model.solve(grid, halting=halting)
        free = grid == 0
        parts["exact"].append((answer == label).all(-1).cpu().numpy())
        parts["right"].append(((answer == label) & free).sum(-1).cpu().numpy())
        parts["open"].append(free.sum(-1).cpu().numpy())
        parts["steps"].append(used.cpu().numpy())
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}


def score(model: GridTRM, puzzles: PuzzleSet, halting: bool = False) -> Score:
    """The totals of `outcomes`; leaves the model in training mode (val points while training)."""
    got = outcomes(model, puzzles, halting=halting)
    model.train()
    n = max(1, len(puzzles))
    cells = float(got["right"].sum()) / max(1.0, float(got["open"].sum()))
    return Score(float(got["exact"].sum()) / n, cells, float(got["steps"].sum()) / n, len(puzzles))


@torch.no_grad()
def exact_by_step(model: GridTRM, puzzles: PuzzleSet) -> list[float]:
    """Exact accuracy after each of the N_sup supervision steps, no halting: whether more
    recursion at inference gives better answers."""
    model.eval()
    device = model.y0.device
    right = [0.0] * model.config.supervision_steps
    for start in range(0, len(puzzles), EVAL_BATCH):
        grid = torch.from_numpy(puzzles.inputs[start : start + EVAL_BATCH]).to(device)
        label = torch.from_numpy(puzzles.labels[start : start + EVAL_BATCH]).to(device)
        x = model.embed(grid)
        y, z = model.start(x)
        for step in range(model.config.supervision_steps):
            y, z, logits, _ = model.deep_recursion(x, y, z)
            right[step] += float((logits.argmax(-1) == label).all(-1).sum())
    model.train()
    return [r / max(1, len(puzzles)) for r in right]


@dataclass(frozen=True, slots=True)
class CurvePoint:
    step: int
    seconds: float
    exact: float
    cells: float


@dataclass
class GridResult:
    steps: int
    train_seconds: float
    parameters: int
    best_step: int | None
    val: Score | None
    curve: list[CurvePoint] = field(default_factory=list)
    stopped_by: str | None = None
    eval_seconds: float = 0.0  # of train_seconds, spent scoring val points
    resumed_from: int | None = None  # the checkpoint's step this training continued from


class Carry:
    """The puzzles in flight: their tokens, answers, (y, z), steps taken and exploration
    minimum. `refill(mask)` puts fresh (augmented) puzzles in the masked slots."""

    STATE = ("grid", "label", "y", "z", "steps", "min_steps")  # what a checkpoint keeps

    def __init__(self, model: GridTRM, data: PuzzleSet, config: GridTrainerConfig, seed: int):
        self.model, self.data, self.config = model, data, config
        self.gen = np.random.default_rng(seed)
        self.draw = data.kind.augmenter(data.params)
        b, cells, hidden = config.batch_size, model.cells, config.hidden
        self.device = device = model.y0.device
        self.grid = torch.zeros(b, cells, dtype=torch.long, device=device)
        self.label = torch.zeros(b, cells, dtype=torch.long, device=device)
        self.y = torch.zeros(b, cells, hidden, device=device)
        self.z = torch.zeros(b, cells, hidden, device=device)
        self.steps = torch.zeros(b, dtype=torch.long, device=device)
        self.min_steps = torch.zeros(b, dtype=torch.long, device=device)
        self.refill(torch.ones(b, dtype=torch.bool, device=device))

    def refill(self, mask: torch.Tensor) -> None:
        slots = torch.nonzero(mask).flatten().tolist()
        if not slots:
            return
        pick = self.gen.integers(len(self.data), size=len(slots))
        grids, labels = self.data.inputs[pick], self.data.labels[pick]
        if self.config.augment:
            for i in range(len(slots)):
                aug = self.draw(self.gen)
                grids[i], labels[i] = aug.apply(grids[i]), aug.apply(labels[i])
        index = torch.tensor(slots, device=self.device)
        self.grid[index] = torch.from_numpy(grids).to(self.device)
        self.label[index] = torch.from_numpy(labels).to(self.device)
        self.y[index], self.z[index] = self.model.y0, self.model.z0
        self.steps[index] = 0
        n_sup, count = self.config.supervision_steps, len(slots)
        explore = torch.from_numpy(self.gen.random(count) < self.config.halt_exploration)
        least = torch.from_numpy(self.gen.integers(min(2, n_sup), n_sup + 1, count))
        self.min_steps[index] = torch.where(explore, least, 0).to(self.device)


def train(
    config: GridTrainerConfig,
    data: PuzzleSet,
    val: PuzzleSet | None,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    max_seconds: float | None = None,
    device: str = "cpu",
    out_dir: Path | None = None,
) -> tuple[GridTRM, GridResult]:
    """The model of the best val point (the last average without val), and what happened.
    With `out_dir`, a checkpoint every `checkpoint_every` steps and on a stop, and a resume
    from the newest one `callbacks.trusts` there (same config, seed and puzzles)."""
    torch.manual_seed(seed)
    model = GridTRM(config, data.vocab, data.side * data.side).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.95)
    )
    ema = Ema(model, config.ema_decay)
    carry = Carry(model, data, config, seed)
    evals = val.take(slice(0, config.eval_puzzles)) if val is not None and len(val) else None
    result = GridResult(0, 0.0, sum(p.numel() for p in model.parameters()), None, None)
    best: dict[str, torch.Tensor] | None = None
    mark = _fingerprint(config, seed, data, evals)
    first = 1
    if out_dir is not None and (at := checkpoints.resume_point(out_dir, mark, callbacks.trusts)):
        best = _restore(at, model, optimizer, ema, carry, result, device)
        first, result.resumed_from = result.steps + 1, result.steps
    started = time.perf_counter() - result.train_seconds
    model.train()
    for step in range(first, config.max_steps + 1):
        if (stop := callbacks.should_stop()) is not None:
            result.stopped_by = stop
            break
        if max_seconds is not None and time.perf_counter() - started > max_seconds:
            result.stopped_by = "max_seconds"
            break
        for group in optimizer.param_groups:
            group["lr"] = config.lr * min(1.0, step / max(1, config.warmup_steps))
        x = model.embed(carry.grid)
        y, z, logits, q = model.deep_recursion(x, carry.y, carry.z)
        right = (logits.argmax(-1) == carry.label).all(-1).float()
        loss = F.cross_entropy(logits.flatten(0, 1), carry.label.flatten())
        loss = loss + config.halt_weight * F.binary_cross_entropy_with_logits(q, right)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        ema.update(model)
        carry.y, carry.z = y.detach(), z.detach()
        carry.steps += 1
        halted = (carry.steps >= config.supervision_steps) | (
            (q.detach() > 0) & (carry.steps >= carry.min_steps)
        )
        carry.refill(halted)
        result.steps = step
        exact = round(float(right.mean()), 4)
        callbacks.on_step(step, config.max_steps, loss=round(float(loss.detach()), 5), exact=exact)
        if evals is not None and (step % config.eval_every == 0 or step == config.max_steps):
            best = _select(model, ema, evals, step, started, result, best, callbacks)
        if out_dir is not None and step % config.checkpoint_every == 0:
            result.train_seconds = round(time.perf_counter() - started, 3)
            _save(out_dir, mark, model, optimizer, ema, carry, result, best, callbacks)
    result.train_seconds = round(time.perf_counter() - started, 3)
    if out_dir is not None and result.stopped_by is not None:
        _save(out_dir, mark, model, optimizer, ema, carry, result, best, callbacks)
    if evals is not None and (not result.curve or result.curve[-1].step != result.steps):
        best = _select(model, ema, evals, result.steps, started, result, best, callbacks)
    model.load_state_dict(best if best is not None else ema.weights)
    return model.eval(), result


def run(
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
    """Train on `corpus_dir/train/`, select on `val/`; write model.safetensors and config.json
    (the best val point's average) into `out_dir`, checkpoints under it. `probe` runs one step
    and one val point on a few puzzles. `contract` and `model_cache` are unused (the trainers
    share one signature)."""
    try:
        cfg = GridTrainerConfig.model_validate(config)
    except ValueError as exc:
        raise StageFailure("bad_input", f"trm_grid config: {exc}") from None
    if probe:
        cfg = cfg.model_copy(update={"max_steps": 1, "eval_puzzles": min(cfg.eval_puzzles, 4)})
    data = PuzzleSet.load(Path(corpus_dir) / "train")
    val_folder = Path(corpus_dir) / "val"
    val = PuzzleSet.load(val_folder) if val_folder.is_dir() else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    threads = torch.get_num_threads()
    if device == "cpu" and cfg.hidden <= 256:  # a model this small runs faster on one thread
        torch.set_num_threads(1)
    reset_peak_vram()
    rss = Rss()
    try:
        model, result = train(
            cfg, data, val, callbacks, seed=seed, device=device, out_dir=Path(out_dir)
        )
    finally:
        torch.set_num_threads(threads)
    rss.sample()
    meta = {"family": data.family, "params": asdict(data.params), "best_step": result.best_step}
    artifacts = save_model(Path(out_dir), model, meta)
    return {
        "trainer": "trm_grid",
        "steps": result.steps,
        "total_steps": cfg.max_steps,
        "rows_trained": result.steps * cfg.batch_size,  # puzzle-steps: slots updated
        "tokens_trained": result.steps * cfg.batch_size * model.cells,
        "stopped_by": result.stopped_by,
        "best_step": result.best_step,
        "parameters": result.parameters,
        "val": asdict(result.val) if result.val else None,
        "curve": [asdict(p) for p in result.curve],
        "artifacts": [str(p) for p in artifacts],
        "resumed_from_step": result.resumed_from,
        "device": device,
        "peak_vram_bytes": peak_vram(),
        "peak_rss_bytes": rss.peak,
        "train_seconds": result.train_seconds,
        "eval_seconds": result.eval_seconds,
    }


def _select(
    model: GridTRM,
    ema: Ema,
    evals: PuzzleSet,
    step: int,
    started: float,
    result: GridResult,
    best: dict[str, torch.Tensor] | None,
    callbacks: TrainerCallbacks,
) -> dict[str, torch.Tensor] | None:
    """Score the average on val; keep it when its exact accuracy (then cell accuracy) is at
    least the best so far (a later equal point has had longer to learn when to halt). The
    training weights are put back."""
    began = time.perf_counter()
    training = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(ema.weights)
    got = score(model, evals)
    model.load_state_dict(training)
    result.eval_seconds = round(result.eval_seconds + time.perf_counter() - began, 3)
    seconds = round(time.perf_counter() - started, 2)
    result.curve.append(CurvePoint(step, seconds, got.exact, got.cells))
    callbacks.on_eval(step, val_exact=got.exact, val_cells=got.cells, seconds=seconds)
    if result.val is None or (got.exact, got.cells) >= (result.val.exact, result.val.cells):
        result.val, result.best_step = got, step
        return {k: v.clone() for k, v in ema.weights.items()}
    return best


# ---- checkpoints -------------------------------------------------------------------------------
CARRY = "carry.safetensors"  # the puzzles in flight and their (y, z)
EMA_WEIGHTS, BEST_WEIGHTS = "ema.safetensors", "best.safetensors"


def _fingerprint(
    config: GridTrainerConfig, seed: int, data: PuzzleSet, evals: PuzzleSet | None
) -> str:
    digest = hashlib.sha256()
    for part in (data, evals):
        if part is not None:
            digest.update(part.inputs.tobytes() + part.labels.tobytes())
    kept = {**config.model_dump(), "seed": seed, "puzzles": digest.hexdigest()}
    return checkpoints.fingerprint(kept, ("checkpoint_every", "eval_every", "max_steps"), [])


def _save(
    out_dir: Path,
    mark: str,
    model: GridTRM,
    optimizer: torch.optim.Optimizer,
    ema: Ema,
    carry: Carry,
    result: GridResult,
    best: dict[str, torch.Tensor] | None,
    callbacks: TrainerCallbacks,
) -> None:
    def write(folder: Path) -> None:
        save_model(folder, model, {})
        save_file(ema.weights, str(folder / EMA_WEIGHTS))
        if best is not None:
            save_file(best, str(folder / BEST_WEIGHTS))
        tensors = {name: getattr(carry, name).contiguous() for name in Carry.STATE}
        save_file(tensors, str(folder / CARRY))

    record = asdict(result)
    order = carry.gen.bit_generator.state
    meta = {"fingerprint": mark, "result": record, "ema_updates": ema.updates, "data_order": order}
    path = checkpoints.save(out_dir, result.steps, write, optimizer, None, meta)
    callbacks.on_checkpoint(result.steps, path)


def _restore(
    at: Path,
    model: GridTRM,
    optimizer: torch.optim.Optimizer,
    ema: Ema,
    carry: Carry,
    result: GridResult,
    device: str,
) -> dict[str, torch.Tensor] | None:
    """Put the checkpoint's state into the run's objects; the best weights, if any."""
    model.load_state_dict(load_file(at / TRM_MODEL, device=device))
    meta = checkpoints.load(at, optimizer)
    ema.weights, ema.updates = load_file(at / EMA_WEIGHTS, device=device), meta["ema_updates"]
    for name, tensor in load_file(at / CARRY, device=device).items():
        setattr(carry, name, tensor)
    carry.gen.bit_generator.state = meta["data_order"]
    saved = meta["result"]
    result.steps, result.train_seconds = saved["steps"], saved["train_seconds"]
    result.eval_seconds, result.best_step = saved["eval_seconds"], saved["best_step"]
    result.val = Score(**saved["val"]) if saved["val"] else None
    result.curve = [CurvePoint(**p) for p in saved["curve"]]
    return load_file(at / BEST_WEIGHTS, device=device) if (at / BEST_WEIGHTS).is_file() else None
