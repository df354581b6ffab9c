"""What a training run will cost, known before it starts: its step count, held
against `TRM_MAX_STEPS`, and an estimate of its memory, held against what this worker has free
(available RAM, or free VRAM on a GPU). Either one over its limit is `bad_input` naming the knobs
and the figure, before anything is allocated: a spec once asked for 2.3e13 steps through
`epochs`, and `hidden` 4096 x 64 recursions x batch 4096 for 4 GB per activation.

The estimates are simple on purpose, counted in float32 bytes (4), and leave out the interpreter
and the libraries (~0.5-1 GB): a refusal means the run cannot fit, not that it might not.

- **trm** (worker/models/trm.py, worker/train/trm.py): parameters P = width*H + 17*H^2 (embed,
  two set layers of 3H->2H->H), held five times (weights, gradients, AdamW's two moments, the
  best epoch's copy); activations of one micro-batch kept for backprop, B rows x C candidates
  (the widest row) x (width + H x (20 x (n + 1) + n + 3)): each `f` keeps ~20H per candidate
  (two set layers: norm H, concat 3H, 2H, GELU 2H, H, residual H), the last cycle runs `f`
  n + 1 times with gradients, plus the sums feeding it and the embedding.
- **qlora** (worker/train/qlora.py): the base model's linear weights at 4 bits and its
  embeddings in float32, LoRA parameters x 16 bytes (weight, gradient, AdamW), and per
  micro-batch the layer-boundary hidden states (micro x seq x hidden x layers), one layer
  recomputed (micro x seq x (10 hidden + 3 intermediate)) and its attention scores (micro x
  heads x seq^2); plus the layers kept instead of recomputed (up to `activation_budget_mb`) and
  the once-dequantized linear weights (float32, 4 bytes a weight, unless `dequant_cache: off`).
  The base model's shape comes from its config.json in MODEL_CACHE, or for the built-in model
  not converted yet from its known sizes; another model not there yet is not estimated (the
  trainer refuses it and says where to put it).
- **gbdt** (worker/train/gbdt.py): the candidate matrix, rows x candidates x features x 8 bytes
  (float64), and LightGBM's binned copy (1 byte a value).

Work, for the trm (`MAX_STEPS` bounds steps, not work: at the schema's largest knobs one step
took 74.7 s, at the defaults 0.06 s): the floating-point operations of one optimizer step,
supervision_steps x rows (batch_size x grad_accum) x candidates a row (the corpus's mean) x
(32 H^2 (n + 1) (cycles + 2) + 6 (width H + H^2)): `f` is two set layers of 3H->2H->H (16 H^2
FLOPs each per candidate), run n + 1 times a cycle; the last cycle also runs backward (twice its
forward), and the embedding runs forward and backward every supervision step. Converted to
seconds at `FLOPS_PER_S`, a rate above what the device reaches on this model (one CPU thread
measured 20-72 GFLOP/s at hidden 64-1024; an H100 does 67 TFLOP/s in float32 at its peak), the
estimate is a lower bound: a run refused by it cannot finish within TRM_MAX_SECONDS. A run that
passes is measured as it goes (worker/kinds/train.py, BudgetCallbacks).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from core.rundir import MESSAGES, TRAIN_ROWS
from core.schemas.puzzles import PUZZLE_META, GridTrainerConfig, grid_work, puzzle_shape
from core.schemas.train import (
    SPEED_MEMORY_MB,
    GbdtTrainerConfig,
    QloraTrainerConfig,
    TrmTrainerConfig,
    qlora_batch,
)
from worker.context import StageFailure
from worker.gpuinfo import detect_gpu
from worker.models.base_model import BUILTIN, BUILTIN_SHAPE
from worker.models.encoding import BLOCKS
from worker.models.feature_space import FeatureSpace
from worker.models.rows import read_rows

FLOAT = 4
GIB = 1024**3
MIB = 1024**2
# Rows the feature width is measured on (fitting every row of a large corpus takes minutes;
# the width of a sample is the width of the whole for any corpus of one kind of state).
WIDTH_SAMPLE = 200
# Packed qlora sequences: a token covers at most this many bytes of messages.jsonl (JSON text),
# so bytes / this / max_seq_len is the fewest packed sequences an epoch can have.
BYTES_PER_TOKEN = 8
# A named base model's linear weights at 4 bits (bitsandbytes nf4 plus its scales).
NF4_BYTES = 0.55
# FLOP/s a trm step is converted at, by device: generous on purpose (see the module's docstring).
FLOPS_PER_S = {"cpu": 1e12, "cuda": 1e14}


@dataclass
class Footprint:
    trainer: str
    steps: int
    steps_formula: str  # how `steps` was counted, with the knobs' values
    bytes: int | None  # None: not estimated (a base model not on this machine)
    parts: dict[str, int] = field(default_factory=dict)
    shape: dict[str, Any] = field(default_factory=dict)  # what the estimate was computed from
    step_flops: float | None = None  # one optimizer step's work; None: not estimated
    flops_formula: str = ""  # how `step_flops` was counted, with the knobs' values

    def describe(self) -> str:
        work = f"; at least {self.seconds():.3g} s of work" if self.step_flops is not None else ""
        if self.bytes is None:
            return f"{self.steps} steps ({self.steps_formula}); memory not estimated{work}"
        parts = ", ".join(f"{k} {gib(v)}" for k, v in self.parts.items())
        return f"{self.steps} steps ({self.steps_formula}); about {gib(self.bytes)} ({parts}){work}"

    def seconds(self, device: str | None = None) -> float:
        """The least time the steps can take on `device` (this worker's when None)."""
        rate = FLOPS_PER_S[device or training_device()]
        return self.steps * (self.step_flops or 0.0) / rate


def training_device() -> str:
    """'cuda' when the trainers here train on a GPU (torch's choice, as theirs), else 'cpu'."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB / 100 else f"{n / 1024**2:.1f} MiB"


# ---- trm -----------------------------------------------------------------------------------
def trm_steps(cfg: dict[str, Any], rows: int, probe: bool = False) -> tuple[int, str]:
    """The trainer's `total`: `max_steps`, or epochs x ceil(rows / effective batch)."""
    micro, accum = int(cfg["batch_size"]), int(cfg["grad_accum"])
    if probe:
        return 1, "probe: one batch"
    if cfg.get("max_steps"):
        return int(cfg["max_steps"]), f"trm.max_steps={cfg['max_steps']}"
    steps = int(cfg["epochs"]) * math.ceil(rows / (micro * accum))
    return steps, (
        f"trm.epochs={cfg['epochs']} x ceil({rows} train rows / (trm.batch_size={micro} x "
        f"trm.grad_accum={accum}))"
    )


def qlora_batch_here(micro: int | str, accum: int | str) -> tuple[int, int]:
    """qlora's micro-batch and accumulation as numbers on this worker (nvidia-smi is asked only
    when one of them is `auto`)."""
    auto = "auto" in (micro, accum)
    return qlora_batch(micro, accum, cuda=auto and detect_gpu() is not None)


def planned_steps(trainer: str, config: dict[str, Any], rows: int) -> tuple[int, str] | None:
    """The dry run's step count from the corpus plan's train rows (None: qlora with packing,
    counted from the packed corpus the real run writes)."""
    if trainer == "trm":
        return trm_steps(TrmTrainerConfig.model_validate(config).model_dump(), rows)
    if trainer == "gbdt":
        rounds = GbdtTrainerConfig.model_validate(config).n_estimators
        return rounds, f"gbdt.n_estimators={rounds} rounds"
    if trainer == "trm_grid":
        steps = GridTrainerConfig.model_validate(config).max_steps
        return steps, f"trm_grid.max_steps={steps}"
    cfg = QloraTrainerConfig.model_validate(config)
    if cfg.max_steps:
        return cfg.max_steps, f"qlora.max_steps={cfg.max_steps}"
    if cfg.packing:
        return None
    micro, accum = qlora_batch_here(cfg.micro_batch, cfg.grad_accum)
    steps = cfg.epochs * math.ceil(rows / (micro * accum))
    return steps, (
        f"qlora.epochs={cfg.epochs} x ceil({rows} rows / (qlora.micro_batch={micro} x "
        f"qlora.grad_accum={accum}))"
    )


def trm_footprint(
    config: dict[str, Any], rows: list[dict[str, Any]], probe: bool = False
) -> Footprint:
    cfg = TrmTrainerConfig.model_validate(config).model_dump()
    hidden, n = int(cfg["hidden"]), int(cfg["n_recursions"])
    micro, accum = int(cfg["batch_size"]), int(cfg["grad_accum"])
    sample = rows[:WIDTH_SAMPLE]
    columns = len(FeatureSpace.fit(sample).names) if sample else 0
    screen = int(cfg["screen"])
    # The network reads the screen's columns (all when it is off), BLOCKS numbers each.
    width = BLOCKS * (min(columns, screen) if screen else columns)
    widest = max((len(r["tools"]) for r in rows), default=0)
    candidates = sum(len(r["tools"]) for r in rows)
    steps, formula = trm_steps(cfg, len(rows), probe)
    params = width * hidden + 17 * hidden * hidden + 20 * hidden
    rows_in_micro = min(micro, len(rows)) if rows else micro
    per_candidate = width + hidden * (20 * (n + 1) + n + 3)
    activations = rows_in_micro * widest * per_candidate * FLOAT
    inputs = min(micro * accum, max(len(rows), 1)) * widest * width * FLOAT  # every chunk's x
    parts = {
        "parameters x5 (weights, gradients, AdamW, best copy)": 5 * params * FLOAT,
        f"activations of {rows_in_micro} rows x {widest} candidates": activations,
        "inputs": inputs,
    }
    if screen and columns > screen:  # the screen's ranker, before the network: a gbdt's matrix
        parts[f"screen: {candidates} candidates x {columns} features (float64, binned)"] = (
            candidates * columns * 9
        )
    shape = {
        "rows": len(rows),
        "widest_row": widest,
        "feature_width": width,
        "hidden": hidden,
        "n_recursions": n,
        "batch_size": micro,
    }
    cycles, sup = int(cfg["cycles"]), 1 if probe else int(cfg["supervision_steps"])
    rows_in_step = min(micro * (1 if probe else accum), max(len(rows), 1))
    mean_candidates = sum(len(r["tools"]) for r in rows) / len(rows) if rows else 0.0
    per_candidate = 32 * hidden**2 * (n + 1) * (cycles + 2) + 6 * (width * hidden + hidden**2)
    flops = sup * rows_in_step * mean_candidates * per_candidate
    flops_formula = (
        f"trm.supervision_steps={sup} x {rows_in_step} rows x {mean_candidates:.1f} candidates x "
        f"trm.hidden={hidden}, trm.n_recursions={n}, trm.cycles={cycles}: "
        f"{flops:.3g} FLOPs a step"
    )
    return Footprint("trm", steps, formula, sum(parts.values()), parts, shape, flops, flops_formula)


# ---- gbdt ----------------------------------------------------------------------------------
def gbdt_footprint(config: dict[str, Any], rows: list[dict[str, Any]]) -> Footprint:
    cfg = GbdtTrainerConfig.model_validate(config).model_dump()
    sample = rows[:WIDTH_SAMPLE]
    width = len(FeatureSpace.fit(sample).names) if sample else 0  # the ranker reads raw values
    candidates = sum(len(r["tools"]) for r in rows)
    parts = {
        f"matrix of {candidates} candidates x {width} features (float64)": candidates * width * 8,
        "LightGBM's binned copy": candidates * width,
    }
    steps = int(cfg["n_estimators"])
    shape = {"rows": len(rows), "candidates": candidates, "feature_width": width}
    return Footprint(
        "gbdt", steps, f"gbdt.n_estimators={steps} rounds", sum(parts.values()), parts, shape
    )


# ---- qlora ---------------------------------------------------------------------------------
def base_model_shape(name: str, model_cache: Path) -> dict[str, int] | None:
    """The sizes in the base model's config.json, when it is a folder under MODEL_CACHE."""
    root = Path(model_cache).resolve()
    folder = (root / name).resolve()
    if not folder.is_relative_to(root):
        return None
    try:
        if (folder / "config.json").is_file():
            cfg = json.loads((folder / "config.json").read_text())
        elif name == BUILTIN:  # converted on first use: the first run is sized all the same
            cfg = dict(BUILTIN_SHAPE)
        else:
            return None
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        return {
            "hidden": hidden,
            "layers": layers,
            "intermediate": int(cfg.get("intermediate_size") or 4 * hidden),
            "vocab": int(cfg["vocab_size"]),
            "heads": int(cfg.get("num_attention_heads") or 1),
        }
    except (ValueError, KeyError, TypeError):
        return None


def qlora_footprint(
    config: dict[str, Any], messages: Path, model_cache: Path, probe: bool = False
) -> Footprint:
    cfg = QloraTrainerConfig.model_validate(config).model_dump()
    micro, accum = qlora_batch_here(cfg["micro_batch"], cfg["grad_accum"])
    seq = int(cfg["max_seq_len"])
    rows, size = 0, 0
    if messages.is_file():
        size = messages.stat().st_size
        with messages.open("rb") as fh:
            rows = sum(1 for line in fh if line.strip())
    per_step = micro * (1 if probe else accum)
    if probe:
        steps, formula = 1, "probe: one batch"
    elif cfg["max_steps"]:
        steps, formula = int(cfg["max_steps"]), f"qlora.max_steps={cfg['max_steps']}"
    elif cfg["packing"]:
        sequences = math.ceil(size / BYTES_PER_TOKEN / seq)
        steps = int(cfg["epochs"]) * math.ceil(sequences / per_step)
        formula = (
            f"at least qlora.epochs={cfg['epochs']} x ceil({sequences} packed sequences of "
            f"qlora.max_seq_len={seq} / (qlora.micro_batch={micro} x qlora.grad_accum={accum}))"
        )
    else:
        steps = int(cfg["epochs"]) * math.ceil(rows / per_step)
        formula = (
            f"qlora.epochs={cfg['epochs']} x ceil({rows} rows / (qlora.micro_batch={micro} x "
            f"qlora.grad_accum={accum}))"
        )
    shape = base_model_shape(str(cfg["base_model"]), model_cache)
    if shape is None:
        return Footprint("qlora", steps, formula, None, {}, {"rows": rows})
    h, layers, inter = shape["hidden"], shape["layers"], shape["intermediate"]
    linear = layers * (4 * h * h + 3 * h * inter)
    targets = cfg["target_modules"]
    modules = 7 if targets == "all-linear" else len(targets)
    lora = layers * modules * int(cfg["r"]) * (h + (inter + h) // 2)
    parts = {
        "base model (4-bit linear, float32 embeddings)": int(linear * NF4_BYTES)
        + shape["vocab"] * h * FLOAT,
        "LoRA weights, gradients, AdamW": lora * 16,
        f"activations of {micro} x {seq} tokens": micro
        * seq
        * FLOAT
        * (h * layers + 10 * h + 3 * inter + shape["heads"] * seq),
    }
    # Layers kept instead of recomputed, up to the budget (`auto`: at most SPEED_MEMORY_MB).
    budget = cfg["activation_budget_mb"]
    if budget:
        budget_bytes = (SPEED_MEMORY_MB if budget == "auto" else int(budget)) * MIB
        kept = min(
            budget_bytes, micro * seq * FLOAT * layers * (10 * h + 3 * inter + shape["heads"] * seq)
        )
        parts[f"activations kept (qlora.activation_budget_mb={cfg['activation_budget_mb']})"] = kept
    if cfg["dequant_cache"] != "off":  # float32 at most; `auto` may leave it out on a small box
        parts[f"dequantized base weights (qlora.dequant_cache={cfg['dequant_cache']})"] = (
            linear * FLOAT
        )
    return Footprint("qlora", steps, formula, sum(parts.values()), parts, {"rows": rows, **shape})


def trm_grid_footprint(config: dict[str, Any], corpus_dir: Path, probe: bool) -> Footprint:
    """The whole-answer trm: core/schemas/puzzles.py `grid_work`, on the train set's shape."""
    cfg = GridTrainerConfig.model_validate(config)
    if probe:
        cfg = cfg.model_copy(update={"max_steps": 1})
    meta = json.loads((corpus_dir / "train" / PUZZLE_META).read_text(encoding="utf-8"))
    cells, vocab = puzzle_shape(meta)
    work = grid_work(cfg, cells, vocab)
    params = 4 * 6 * work.parameters
    formula = f"trm_grid.max_steps={cfg.max_steps}" + (" (probe: one step)" if probe else "")
    how = (
        f"{work.step_flops:.3g} FLOPs a step (trm_grid.batch_size={cfg.batch_size} x {cells} "
        f"cells, hidden={cfg.hidden}, n={cfg.n_recursions}, T={cfg.cycles})"
    )
    # The val points' work, spread over the steps so that steps x step_flops counts it too.
    per_step = work.step_flops + work.eval_flops / max(1, cfg.max_steps)
    parts = {"parameters x6": params, "activations and carry": work.bytes - params}
    return Footprint(
        "trm_grid",
        cfg.max_steps,
        formula,
        work.bytes,
        parts,
        {"cells": cells, "vocab": vocab},
        per_step,
        how,
    )


# ---- the check -----------------------------------------------------------------------------
def estimate(
    trainer: str, config: dict[str, Any], corpus_dir: Path, model_cache: Path, probe: bool = False
) -> Footprint:
    if trainer == "trm_grid":
        return trm_grid_footprint(config, corpus_dir, probe)
    if trainer == "qlora":
        return qlora_footprint(config, corpus_dir / MESSAGES, model_cache, probe)
    rows = read_rows(corpus_dir / TRAIN_ROWS)
    if trainer == "gbdt":
        return gbdt_footprint(config, rows)
    return trm_footprint(config, rows, probe)


def free_memory() -> tuple[int, str]:
    """(bytes, what they are): free VRAM when training will run on a GPU, else available RAM."""
    import torch

    if torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info()
        return int(free), "free VRAM"
    return int(psutil.virtual_memory().available), "available RAM"


# What lowers a trainer's work, named in a refusal.
WORK_KNOBS = {
    "trm": "trm.max_steps or trm.epochs, trm.supervision_steps, trm.hidden, trm.n_recursions, "
    "trm.cycles or trm.batch_size",
    "trm_grid": "trm_grid.max_steps, trm_grid.batch_size, trm_grid.hidden, "
    "trm_grid.n_recursions, trm_grid.cycles or trm_grid.eval_puzzles",
}


def check(
    footprint: Footprint,
    max_steps: int,
    free: tuple[int, str] | None = None,
    max_seconds: float | None = None,
    device: str | None = None,
) -> None:
    """`bad_input` when the run asks for more steps than `max_steps`, more work than
    `max_seconds` can hold on `device` (None: not checked, as for a run with a budget, which
    stops it in time) or more memory than is free; the message names the knobs and gives the
    figures."""
    if footprint.steps > max_steps:
        raise StageFailure(
            "bad_input",
            f"{footprint.trainer} would train {footprint.steps} steps ({footprint.steps_formula}),"
            f" over this server's limit of {max_steps} (TRM_MAX_STEPS); lower the epochs or set "
            f"{footprint.trainer}.max_steps",
        )
    if max_seconds is not None and footprint.step_flops is not None:
        where = device or training_device()
        seconds = footprint.seconds(where)
        if seconds > max_seconds:
            raise StageFailure(
                "bad_input",
                f"{footprint.trainer} would take at least {seconds:.3g} s: {footprint.steps} "
                f"steps ({footprint.steps_formula}) x {footprint.flops_formula}, at "
                f"{FLOPS_PER_S[where]:.0e} FLOP/s on {where}; over this server's limit of "
                f"{max_seconds:g} s (TRM_MAX_SECONDS); lower {WORK_KNOBS[footprint.trainer]}, "
                f"or set budget.max_seconds",
            )
    if footprint.bytes is None:
        return
    available, what = free if free is not None else free_memory()
    if footprint.bytes > available:
        knobs = {
            "trm": "trm.hidden, trm.n_recursions or trm.batch_size",
            "qlora": "qlora.micro_batch, qlora.max_seq_len or qlora.r",
            "gbdt": "the corpus (fewer rows or candidates)",
            "trm_grid": "trm_grid.batch_size, trm_grid.hidden or trm_grid.n_recursions",
        }[footprint.trainer]
        raise StageFailure(
            "bad_input",
            f"{footprint.trainer} would need about {gib(footprint.bytes)} "
            f"({', '.join(f'{k} {gib(v)}' for k, v in footprint.parts.items())}), more than "
            f"this worker's {gib(available)} of {what}; lower {knobs}",
        )
