"""Augmentations that keep an answer valid: a permutation of the cells and a relabelling of the
tokens, applied alike to a puzzle and its answer.

- sudoku: digits relabelled (blank stays blank); bands (row groups of a box's height) shuffled,
  rows shuffled within each band, stacks and columns within stacks likewise; transposed half the
  time where boxes are square (a 6x6's 2x3 boxes would become 3x2).
- maze: the eight symmetries of the square (rotations, with and without a mirror); tokens kept.

An `Augmentation` is applied to whole arrays (rows x cells) at once: `apply(grids)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from worker.puzzles.sudoku import Shape


@dataclass(frozen=True, slots=True)
class Augmentation:
    """`cells[i]`: which old cell the new cell `i` takes its token from; `tokens[t]`: the new
    token for old token `t`."""

    cells: np.ndarray
    tokens: np.ndarray

    def apply(self, grids: np.ndarray) -> np.ndarray:
        return self.tokens[grids[..., self.cells]]


def _groups(rng: random.Random, groups: int, size: int) -> list[int]:
    """Indices 0..groups*size-1: the groups in a random order, each group's members shuffled."""
    order = list(range(groups))
    rng.shuffle(order)
    out: list[int] = []
    for g in order:
        members = list(range(g * size, (g + 1) * size))
        rng.shuffle(members)
        out += members
    return out


def sudoku(rng: random.Random, shape: Shape) -> Augmentation:
    side = shape.side
    rows = _groups(rng, side // shape.box_rows, shape.box_rows)
    cols = _groups(rng, side // shape.box_cols, shape.box_cols)
    cells = np.array([rows[r] * side + cols[c] for r in range(side) for c in range(side)])
    if shape.box_rows == shape.box_cols and rng.random() < 0.5:
        cells = cells.reshape(side, side).T.reshape(-1)
    digits = list(range(1, side + 1))
    rng.shuffle(digits)
    return Augmentation(cells, np.array([0, *digits]))


def maze(rng: random.Random, side: int, vocab: int) -> Augmentation:
    index = np.arange(side * side).reshape(side, side)
    index = np.rot90(index, rng.randrange(4))
    if rng.random() < 0.5:
        index = index.T
    return Augmentation(np.ascontiguousarray(index).reshape(-1), np.arange(vocab))


def identity(cells: int, vocab: int) -> Augmentation:
    return Augmentation(np.arange(cells), np.arange(vocab))
