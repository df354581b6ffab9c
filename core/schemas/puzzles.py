"""The grid trm's config: the paper's whole-answer model (worker/models/trm_grid.py) and its
training (worker/train/trm_grid.py), every knob bounded so that the work a config asks for is.

In the paper's terms: one 2-layer network (`mixer`: an MLP over the cells, or self-attention)
applied `n_recursions` times to the latent per answer update (n), `cycles` such rounds per
supervision step with the first cycles-1 gradient-free (T), and up to `supervision_steps`
deeply supervised steps per puzzle over the detached (y, z) carry, with a halting head (N_sup).
`gradient="one_step"` back-propagates through the last latent update and the answer update only
(the one-step gradient the paper compares against); n = T = N_sup = 1 is the one-step model.

The work of a run is `max_steps` optimizer steps of `batch_size` puzzles, each step
(n + 1) x cycles applications of the network: `network_calls(config)` says how many.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.schemas.common import STEPS_LIMIT, StrictModel


class GridTrainerConfig(StrictModel):
    hidden: int = Field(default=64, ge=8, le=1024)
    mixer: Literal["mlp", "attention"] = "mlp"
    heads: int = Field(default=4, ge=1, le=32)  # attention only; must divide `hidden`
    expansion: float = Field(default=2.0, gt=0, le=8)  # inner width of the MLPs, x the width
    n_recursions: int = Field(default=6, ge=1, le=16)
    cycles: int = Field(default=3, ge=1, le=8)
    supervision_steps: int = Field(default=16, ge=1, le=32)
    gradient: Literal["full", "one_step"] = "full"
    batch_size: int = Field(default=64, ge=1, le=4096)
    max_steps: int = Field(default=2000, ge=1, description=STEPS_LIMIT)
    lr: float = Field(default=1e-3, gt=0, lt=1)
    weight_decay: float = Field(default=0.1, ge=0, le=10)
    warmup_steps: int = Field(default=100, ge=0, le=1_000_000)
    # The halting head's loss beside the answer's, and the share of puzzles made to run a
    # random number of supervision steps before they may halt (the paper's exploration).
    halt_weight: float = Field(default=0.5, ge=0, le=10)
    halt_exploration: float = Field(default=0.1, ge=0, le=1)
    ema_decay: float = Field(default=0.999, ge=0, lt=1)
    augment: bool = True
    eval_every: int = Field(default=200, ge=1, le=1_000_000)
    eval_puzzles: int = Field(default=256, ge=1, le=100_000)
    checkpoint_every: int = Field(default=500, ge=1, le=1_000_000)


def network_calls(config: GridTrainerConfig) -> int:
    """Applications of the 2-layer network per puzzle per optimizer step (forward)."""
    return (config.n_recursions + 1) * config.cycles
