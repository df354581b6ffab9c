"""The whole-answer tiny recursive model (Jolicoeur-Martineau 2025, "Less is More: Recursive
Reasoning with Tiny Networks"): a grid of tokens in, a grid of the same shape out.

Read top to bottom: the one network, the recursion, the model's files. The training loop (deep
supervision over the carry, halting, EMA, selection on val) is `worker/train/trm_grid.py`.

- **Input** `x`: each cell's token embedding (scaled to unit size) plus a learned embedding of
  its position: (puzzles, cells, hidden).
- **One network** `f`: two post-normed blocks, each a mixer across cells (an MLP over the cell
  axis, the paper's choice for Sudoku; self-attention, its choice for mazes; or a local 3x3
  convolution, which moves information one cell a block) then a SwiGLU MLP per cell.
- **Latent recursion**: `z <- f(x + y + z)` `n` times, then the answer `y <- f(y + z)`.
- **Deep recursion**: `T` such cycles; the first `T - 1` without gradients, the last with
  (`gradient="one_step"`: only its last latent update and the answer update record gradients).
- **Heads**: token logits per cell from `y`; a halting logit per puzzle from `y`'s mean over
  cells ("is the whole answer right?"), its bias starting at -5 so that nothing halts at first.
- **Files**: `model.safetensors` and `config.json` (the config, the vocabulary and cell count).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from core.rundir import TRM_CONFIG, TRM_MODEL, write_bytes_atomic, write_json_atomic
from core.schemas.puzzles import GRID_FORMAT, GridTrainerConfig

FORMAT = GRID_FORMAT


# ---- the one network ---------------------------------------------------------------------------
class SwiGLU(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(width, 2 * inner, bias=False)
        self.down = nn.Linear(inner, width, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(h).chunk(2, -1)
        return self.down(F.silu(gate) * up)


class CellMixer(nn.Module):
    """Mixes information across cells: an MLP along the cell axis (each channel alike),
    multi-head self-attention over the cells, or a depthwise 3x3 convolution over the grid
    (a cell reads its eight neighbours only: information moves one cell a block)."""

    def __init__(self, kind: str, cells: int, hidden: int, heads: int, expansion: float) -> None:
        super().__init__()
        self.kind, self.heads = kind, heads
        self.side = math.isqrt(cells)
        if kind == "mlp":
            self.mlp = SwiGLU(cells, max(1, round(expansion * cells)))
        elif kind == "conv":
            self.conv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        else:
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.out = nn.Linear(hidden, hidden, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.kind == "mlp":
            return self.mlp(h.transpose(1, 2)).transpose(1, 2)
        b, cells, width = h.shape
        if self.kind == "conv":
            grid = h.transpose(1, 2).reshape(b, width, self.side, self.side)
            return self.conv(grid).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(h).view(b, cells, 3, self.heads, width // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = F.scaled_dot_product_attention(q, k, v)
        return self.out(att.transpose(1, 2).reshape(b, cells, width))


class Block(nn.Module):
    """h <- norm(h + mix(h)); h <- norm(h + mlp(h)): post-norm, as the paper's network."""

    def __init__(self, config: GridTrainerConfig, cells: int) -> None:
        super().__init__()
        hidden = config.hidden
        self.mix = CellMixer(config.mixer, cells, hidden, config.heads, config.expansion)
        self.mlp = SwiGLU(hidden, max(1, round(config.expansion * hidden)))
        self.norm1 = nn.RMSNorm(hidden, elementwise_affine=False)
        self.norm2 = nn.RMSNorm(hidden, elementwise_affine=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm1(h + self.mix(h))
        return self.norm2(h + self.mlp(h))


# ---- the recursion -----------------------------------------------------------------------------
class GridTRM(nn.Module):
    y0: torch.Tensor
    z0: torch.Tensor

    def __init__(self, config: GridTrainerConfig, vocab: int, cells: int) -> None:
        super().__init__()
        if config.mixer == "attention" and config.hidden % config.heads:
            raise ValueError(f"hidden ({config.hidden}) must be a multiple of heads")
        self.config, self.vocab, self.cells = config, vocab, cells
        hidden = config.hidden
        self.scale = math.sqrt(hidden)
        self.tokens = nn.Embedding(vocab, hidden)
        nn.init.normal_(self.tokens.weight, std=1 / self.scale)
        self.position = nn.Parameter(torch.randn(cells, hidden) / self.scale)
        self.blocks = nn.ModuleList([Block(config, cells), Block(config, cells)])
        # The carry's start: fixed random vectors, as the paper's.
        self.register_buffer("y0", torch.randn(hidden))
        self.register_buffer("z0", torch.randn(hidden))
        self.answer = nn.Linear(hidden, vocab, bias=False)
        self.halt = nn.Linear(hidden, 1)
        nn.init.zeros_(self.halt.weight)
        nn.init.constant_(self.halt.bias, -5.0)

    def embed(self, grid: torch.Tensor) -> torch.Tensor:
        """(puzzles, cells) tokens -> (puzzles, cells, hidden)."""
        return self.scale * (self.tokens(grid) + self.position)

    def start(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.y0.expand_as(x).clone(), self.z0.expand_as(x).clone()

    def f(self, h: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            h = block(h)
        return h

    def latent_recursion(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for _ in range(self.config.n_recursions):
            z = self.f(x + y + z)
        return self.f(y + z), z

    def deep_recursion(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One supervision step from the carry (y, z): T - 1 cycles without gradients, the last
        with. Returns the new (y, z) (attached: the trainer detaches them), the token logits
        (puzzles, cells, vocab) and the halting logits (puzzles,)."""
        with torch.no_grad():
            for _ in range(self.config.cycles - 1):
                y, z = self.latent_recursion(x, y, z)
            if self.config.gradient == "one_step":
                for _ in range(self.config.n_recursions - 1):
                    z = self.f(x + y + z)
        if self.config.gradient == "one_step":
            z = self.f(x + y + z)
            y = self.f(y + z)
        else:
            y, z = self.latent_recursion(x, y, z)
        return y, z, self.answer(y), self.halt(y.mean(1)).squeeze(-1)

    @torch.no_grad()
    def solve(self, grid: torch.Tensor, halting: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(answers (puzzles, cells), supervision steps each puzzle used): each puzzle stops at
        the first step whose halting logit is > 0 (`halting`), else after N_sup steps."""
        x = self.embed(grid)
        y, z = self.start(x)
        steps = self.config.supervision_steps
        answers = torch.zeros_like(grid)
        used = torch.full((grid.shape[0],), steps, dtype=torch.long, device=grid.device)
        done = torch.zeros(grid.shape[0], dtype=torch.bool, device=grid.device)
        for step in range(steps):
            y, z, logits, q = self.deep_recursion(x, y, z)
            stop = ~done & ((q > 0) if halting else torch.zeros_like(done))
            if step == steps - 1:
                stop = ~done
            answers[stop] = logits[stop].argmax(-1)
            used[stop] = step + 1
            done |= stop
            if bool(done.all()):
                break
        return answers, used


# ---- files -------------------------------------------------------------------------------------
def save_model(folder: Path, model: GridTRM, meta: dict[str, Any]) -> list[Path]:
    """model.safetensors and config.json (the config, vocab, cells and `meta`), each whole."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    write_bytes_atomic(folder / TRM_MODEL, safetensors_bytes(weights))
    config = {"format": FORMAT, "config": model.config.model_dump(), "vocab": model.vocab}
    write_json_atomic(folder / TRM_CONFIG, {**config, "cells": model.cells, **meta})
    return [folder / TRM_MODEL, folder / TRM_CONFIG]


def load_model(folder: Path, device: str = "cpu") -> GridTRM:
    meta = json.loads((folder / TRM_CONFIG).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder / TRM_CONFIG}: not a grid trm ({meta.get('format')})")
    model = GridTRM(GridTrainerConfig(**meta["config"]), int(meta["vocab"]), int(meta["cells"]))
    model.load_state_dict(load_file(folder / TRM_MODEL, device=device))
    return model.eval()
