"""The grid trm's config: the paper's whole-answer model (worker/models/trm_grid.py) and its
training (worker/train/trm_grid.py), every knob bounded so that the work a config asks for is.

In the paper's terms: one 2-layer network (`mixer`: an MLP over the cells, self-attention, or a
local 3x3 convolution) applied `n_recursions` times to the latent per answer update (n), `cycles`
such rounds per supervision step with the first cycles-1 gradient-free (T), and up to
`supervision_steps` deeply supervised steps per puzzle over the detached (y, z) carry, with a
halting head (N_sup).
`gradient="one_step"` back-propagates through the last latent update and the answer update only
(the one-step gradient the paper compares against); n = T = N_sup = 1 is the one-step model.

The work of a run is `max_steps` optimizer steps of `batch_size` puzzles, each step
(n + 1) x cycles applications of the network: `network_calls(config)` says how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from core.schemas.common import MAX_COUNT, STEPS_LIMIT, StrictModel


class GridTrainerConfig(StrictModel):
    hidden: int = Field(
        default=64,
        ge=8,
        le=1024,
        description="Width of each cell's vector: the model's size, work and memory grow with it.",
    )
    mixer: Literal["mlp", "attention", "conv"] = Field(
        default="mlp",
        description="How cells exchange information in each block: an MLP along the cells, "
        "self-attention, or a 3x3 convolution over the grid (each cell sees its neighbours only, "
        "so one pass of the network reaches two cells away).",
    )
    heads: int = Field(
        default=4,
        ge=1,
        le=32,
        description="Attention heads (the attention mixer only); must divide `hidden`.",
    )
    expansion: float = Field(
        default=2.0,
        gt=0,
        le=8,
        description="Inner width of the MLPs, as a multiple of the width they read.",
    )
    n_recursions: int = Field(
        default=6,
        ge=1,
        le=16,
        description="Latent updates per answer update (the paper's n).",
    )
    cycles: int = Field(
        default=3,
        ge=1,
        le=8,
        description="Rounds per supervision step, the first cycles-1 without gradients (the "
        "paper's T).",
    )
    supervision_steps: int = Field(
        default=16,
        ge=1,
        le=32,
        description="Deeply supervised steps a puzzle gets at most, each over the carried (y, z); "
        "the halting head may free it sooner (the paper's N_sup).",
    )
    gradient: Literal["full", "one_step"] = Field(
        default="full",
        description="`full` back-propagates through every recorded update; `one_step` through "
        "the last latent update and the answer update only (the paper's comparison).",
    )
    batch_size: int = Field(
        default=64, ge=1, le=4096, description="Puzzles in flight per optimizer step."
    )
    max_steps: int = Field(default=2000, ge=1, description=STEPS_LIMIT)
    lr: float = Field(
        default=1e-3,
        gt=0,
        lt=1,
        description="AdamW learning rate, reached after `warmup_steps`.",
    )
    weight_decay: float = Field(default=0.1, ge=0, le=10, description="AdamW weight decay.")
    warmup_steps: int = Field(
        default=100,
        ge=0,
        le=1_000_000,
        description="Optimizer steps over which the learning rate rises linearly to `lr`.",
    )
    halt_weight: float = Field(
        default=0.5,
        ge=0,
        le=10,
        description="Weight of the halting head's loss beside the answer's.",
    )
    halt_exploration: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Share of puzzles made to run a random 2..N_sup supervision steps before "
        "they may halt (the paper's exploration).",
    )
    ema_decay: float = Field(
        default=0.999,
        ge=0,
        lt=1,
        description="Decay of the weights' moving average, the weights scored and kept.",
    )
    augment: bool = Field(
        default=True,
        description="Give each drawn puzzle a random answer-keeping transformation, so a small "
        "set is seen in many forms.",
    )
    eval_every: int = Field(
        default=200,
        ge=1,
        le=1_000_000,
        description="Optimizer steps between val points; the best point's weights are kept.",
    )
    eval_puzzles: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="Val puzzles scored at each val point (all N_sup steps each).",
    )
    checkpoint_every: int = Field(
        default=500,
        ge=1,
        le=1_000_000,
        description="Optimizer steps between checkpoints (one is also written on a stop).",
    )

    @field_validator("heads")
    @classmethod
    def _heads_divide_hidden(cls, heads: int, info: ValidationInfo) -> int:
        hidden, mixer = info.data.get("hidden"), info.data.get("mixer")
        if mixer == "attention" and isinstance(hidden, int) and hidden % heads:
            raise ValueError(f"must divide hidden ({hidden}) for the attention mixer")
        return heads


def network_calls(config: GridTrainerConfig) -> int:
    """Applications of the 2-layer network per puzzle per optimizer step (forward)."""
    return (config.n_recursions + 1) * config.cycles


# ---- the service's side: a puzzle source, the work a config asks for ----------------------------
PUZZLE_ARRAYS, PUZZLE_META = "puzzles.npz", "puzzles.json"  # a puzzle set's two files
GRID_FORMAT = "trm-grid-v1"  # the `format` in a grid trm's config.json (worker/models/trm_grid.py)
# FLOP/s the work is converted at before any worker is chosen: a fast GPU's float32 rate, so a
# refusal at submit means no worker could finish (the worker checks again at its own rate).
SUBMIT_FLOPS_PER_S = 1e14


class PuzzleSource(StrictModel):
    """A generated puzzle set: the folder (under DATA_DIR) that `trm envs generate --families
    sudoku` or `python -m worker.puzzles` wrote, holding puzzles.json and puzzles.npz. Read by
    the `trm_grid` trainer only. Its puzzles are split at random (split.seed): `anchor_share`
    of them held out as the anchors (never trained on, never used to pick the model), then
    split.val_fraction of the rest as val; a source named in split.anchor is held out whole."""

    type: Literal["puzzles"] = Field(description="A generated puzzle set.")
    name: str = Field(
        min_length=1, max_length=200, description="The source's name, unique in the corpus."
    )
    path: str = Field(max_length=4096, description="a folder under DATA_DIR holding a puzzle set")
    anchor_share: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Share of the set's puzzles held out as anchors: never trained on, never "
        "used to pick the model.",
    )
    limit: int | None = Field(default=None, ge=1, le=MAX_COUNT, description="its first N puzzles")


def check_puzzle_trainer(trainer: str, source_types: list[str]) -> None:
    """A puzzle set feeds the grid trm only, and the grid trm reads puzzle sets only."""
    puzzles = [t == "puzzles" for t in source_types]
    if trainer == "trm_grid" and not all(puzzles):
        raise ValueError(
            "trainer trm_grid (whole-answer puzzles) reads puzzle sets only: every "
            "corpus.sources[] must be of type puzzles"
        )
    if trainer != "trm_grid" and any(puzzles):
        raise ValueError(
            f"a puzzles source feeds trainer trm_grid only (this spec's trainer is {trainer})"
        )


def puzzle_shape(meta: dict[str, Any]) -> tuple[int, int]:
    """(cells, vocabulary) of a set from its puzzles.json: a sudoku's tokens are its digits and
    the blank; a maze's are open, wall, start, goal and path."""
    side = int(meta["params"]["side"])
    return side * side, (side + 1 if meta["family"] == "sudoku" else 5)


@dataclass(frozen=True, slots=True)
class GridWork:
    """What one run of `config` on puzzles of `cells` cells asks for, in float32 numbers."""

    step_flops: float  # one optimizer step, forward and backward
    eval_flops: float  # every val point together
    parameters: int
    bytes: int  # parameters held six times (weights, gradient, AdamW's two, EMA, best), the
    # carry, and the activations the last cycle keeps for backward

    def seconds(self, steps: int, flops_per_s: float) -> float:
        return (steps * self.step_flops + self.eval_flops) / flops_per_s


def grid_work(config: GridTrainerConfig, cells: int, vocab: int) -> GridWork:
    """The arithmetic of worker/models/trm_grid.py. One application of the network `f` (two
    blocks) per puzzle: each block's per-cell SwiGLU 6 e C H^2, and its mixer, an MLP along the
    cells (6 e H C^2), attention (8 C H^2 + 4 C^2 H) or a depthwise 3x3 convolution (18 C H).
    A step runs f (n + 1) x T times forward and the recorded part ((n + 1), or 2 for the
    one-step gradient) twice more for backward."""
    h, c, e = config.hidden, cells, config.expansion
    inner = max(1, round(e * h))
    if config.mixer == "mlp":
        mixer_flops, mixer_params = 6 * h * c * max(1, round(e * c)), 3 * c * max(1, round(e * c))
    elif config.mixer == "conv":  # depthwise 3x3
        mixer_flops, mixer_params = 2 * 9 * c * h, 10 * h
    else:
        mixer_flops, mixer_params = 8 * c * h * h + 4 * c * c * h, 4 * h * h
    f = 2 * (mixer_flops + 6 * c * h * inner)
    applications = (config.n_recursions + 1) * config.cycles
    recorded = config.n_recursions + 1 if config.gradient == "full" else 2
    heads = 6 * c * h * vocab
    step = config.batch_size * (f * (applications + 2 * recorded) + heads)
    evals = -(-config.max_steps // config.eval_every) * config.eval_puzzles
    eval_flops = evals * config.supervision_steps * (f * applications + heads / 3)
    parameters = 2 * (mixer_params + 3 * h * inner) + 2 * vocab * h + c * h + h + 1
    mixer_kept = {"attention": 3 * h, "conv": h}.get(config.mixer, 3 * e * c)
    kept = 2 * (4 * h + 3 * inner + mixer_kept)
    scores = 2 * config.heads * c * c if config.mixer == "attention" else 0
    activations = config.batch_size * recorded * (c * kept + scores)
    carry = config.batch_size * c * (4 * h + 3 * vocab)
    return GridWork(step, eval_flops, parameters, int(4 * (6 * parameters + activations + carry)))


def grid_refusal(
    config: GridTrainerConfig, cells: int, vocab: int, max_seconds: float, flops_per_s: float
) -> tuple[str, str] | None:
    """(field, message) when `config.max_steps` steps on this set cannot finish within
    `max_seconds` at `flops_per_s`, a rate above what a device reaches on this model."""
    work = grid_work(config, cells, vocab)
    seconds = work.seconds(config.max_steps, flops_per_s)
    if seconds <= max_seconds:
        return None
    return "trm_grid.max_steps", (
        f"{config.max_steps} steps of {config.batch_size} puzzles x {cells} cells at hidden "
        f"{config.hidden}, n={config.n_recursions}, T={config.cycles} ({work.step_flops:.3g} "
        f"FLOPs a step, plus {config.eval_puzzles} val puzzles x N_sup="
        f"{config.supervision_steps} every {config.eval_every} steps) is at least "
        f"{seconds:.3g} s of work at {flops_per_s:.0e} FLOP/s, over this server's limit of "
        f"{max_seconds:g} s (TRM_MAX_SECONDS); lower trm_grid.max_steps, batch_size, hidden, "
        f"n_recursions, cycles or eval_puzzles, or set budget.max_seconds"
    )
