"""Sudoku (9x9 with 3x3 boxes, 6x6 with 2x3 boxes): a clean-room generator, solvers and checks.

A grid is a flat tuple of `side * side` digits, row by row; 0 is a blank. Three solvers:

- `count_solutions(grid, shape, limit)`: backtracking on the most constrained cell, stopping at
  `limit` solutions; `limit=2` tells unique from not.
- `solve_singles(grid, shape)`: the human techniques only (naked singles: a cell with one
  candidate; hidden singles: a digit with one place in a row, column or box), repeated until
  stuck. A puzzle it solves needs no search; one it does not (yet has a unique solution) does.
- `solve(grid, shape)`: the unique solution, by search.

`generate(rng, shape, givens, technique)`: a random full grid (seeded backtracking fill), then
blanks dug in a random order, each kept only while the solution stays unique, until `givens`
remain or no blank can be added; kept only when the technique it needs matches (`singles`: the
singles solver finishes it; `search`: it does not; `any`). Difficulty is therefore the fewest
givens and the technique.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Technique = Literal["singles", "search", "any"]


@dataclass(frozen=True, slots=True)
class Shape:
    """A sudoku's geometry: boxes of `box_rows` x `box_cols`; the side is their product."""

    box_rows: int
    box_cols: int

    @property
    def side(self) -> int:
        return self.box_rows * self.box_cols

    @property
    def cells(self) -> int:
        return self.side * self.side

    def box(self, cell: int) -> int:
        r, c = divmod(cell, self.side)
        return (r // self.box_rows) * self.box_rows + c // self.box_cols

    def units(self) -> list[list[int]]:
        """Every row, column and box as its cells."""
        s = self.side
        rows = [[r * s + c for c in range(s)] for r in range(s)]
        cols = [[r * s + c for r in range(s)] for c in range(s)]
        boxes: list[list[int]] = [[] for _ in range(s)]
        for cell in range(self.cells):
            boxes[self.box(cell)].append(cell)
        return rows + cols + boxes


SHAPES = {9: Shape(3, 3), 6: Shape(2, 3), 4: Shape(2, 2)}


class _Masks:
    """Which digits each row, column and box already holds, as bit masks (bit d: digit d)."""

    def __init__(self, grid: list[int], shape: Shape) -> None:
        s = shape.side
        self.shape, self.full = shape, ((1 << s) - 1) << 1
        self.row, self.col, self.box = [0] * s, [0] * s, [0] * s
        self.ok = True
        for cell, d in enumerate(grid):
            if d:
                if not self.free(cell) & (1 << d):
                    self.ok = False  # a clash among the givens
                self.place(cell, d)

    def free(self, cell: int) -> int:
        r, c = divmod(cell, self.shape.side)
        used = self.row[r] | self.col[c] | self.box[self.shape.box(cell)]
        return self.full & ~used

    def place(self, cell: int, d: int) -> None:
        r, c = divmod(cell, self.shape.side)
        bit = 1 << d
        self.row[r] |= bit
        self.col[c] |= bit
        self.box[self.shape.box(cell)] |= bit

    def unplace(self, cell: int, d: int) -> None:
        r, c = divmod(cell, self.shape.side)
        bit = ~(1 << d)
        self.row[r] &= bit
        self.col[c] &= bit
        self.box[self.shape.box(cell)] &= bit


def _digits(mask: int) -> list[int]:
    return [d for d in range(1, mask.bit_length()) if mask >> d & 1]


def _search(
    grid: list[int], masks: _Masks, limit: int, found: list[list[int]], rng: random.Random | None
) -> None:
    """Depth-first on the blank with the fewest candidates; appends solutions to `found` until
    `limit` of them are there. `rng` shuffles the digits tried (the generator's fill)."""
    best, best_mask, best_count = -1, 0, 99
    for cell, d in enumerate(grid):
        if d == 0:
            mask = masks.free(cell)
            count = mask.bit_count()
            if count < best_count:
                best, best_mask, best_count = cell, mask, count
                if count <= 1:
                    break
    if best < 0:
        found.append(list(grid))
        return
    options = _digits(best_mask)
    if rng is not None:
        rng.shuffle(options)
    for d in options:
        grid[best] = d
        masks.place(best, d)
        _search(grid, masks, limit, found, rng)
        masks.unplace(best, d)
        grid[best] = 0
        if len(found) >= limit:
            return


def count_solutions(grid: tuple[int, ...] | list[int], shape: Shape, limit: int = 2) -> int:
    """How many solutions `grid` has, counting no further than `limit`."""
    work = [int(d) for d in grid]
    masks = _Masks(work, shape)
    if not masks.ok:
        return 0
    found: list[list[int]] = []
    _search(work, masks, limit, found, None)
    return len(found)


def solve(grid: tuple[int, ...] | list[int], shape: Shape) -> tuple[int, ...] | None:
    """The solution when there is exactly one, else None."""
    work = [int(d) for d in grid]
    masks = _Masks(work, shape)
    found: list[list[int]] = []
    if masks.ok:
        _search(work, masks, 2, found, None)
    return tuple(found[0]) if len(found) == 1 else None


def solve_singles(grid: tuple[int, ...] | list[int], shape: Shape) -> tuple[int, ...] | None:
    """The solution reached by naked and hidden singles alone, or None where they get stuck."""
    work = [int(d) for d in grid]
    masks = _Masks(work, shape)
    if not masks.ok:
        return None
    units = shape.units()
    progress = True
    while progress and 0 in work:
        progress = False
        for cell, d in enumerate(work):  # naked singles
            if d == 0:
                mask = masks.free(cell)
                if mask == 0:
                    return None
                if mask.bit_count() == 1:
                    work[cell] = mask.bit_length() - 1
                    masks.place(cell, work[cell])
                    progress = True
        for unit in units:  # hidden singles
            for d in range(1, shape.side + 1):
                places = [c for c in unit if work[c] == 0 and masks.free(c) >> d & 1]
                if len(places) == 1 and all(work[c] != d for c in unit):
                    work[places[0]] = d
                    masks.place(places[0], d)
                    progress = True
    return tuple(work) if 0 not in work else None


def is_solution(
    puzzle: tuple[int, ...] | list[int], answer: tuple[int, ...] | list[int], shape: Shape
) -> bool:
    """Whether `answer` is a full valid grid that keeps every given of `puzzle`."""
    if len(answer) != shape.cells or len(puzzle) != shape.cells:
        return False
    if any(p and p != a for p, a in zip(puzzle, answer, strict=True)):
        return False
    want = set(range(1, shape.side + 1))
    return all({answer[c] for c in unit} == want for unit in shape.units())


def technique(puzzle: tuple[int, ...] | list[int], shape: Shape) -> Technique:
    """`singles` when naked and hidden singles finish it, else `search`."""
    return "singles" if solve_singles(puzzle, shape) is not None else "search"


def full_grid(rng: random.Random, shape: Shape) -> tuple[int, ...]:
    """A random valid full grid."""
    work = [0] * shape.cells
    found: list[list[int]] = []
    _search(work, _Masks(work, shape), 1, found, rng)
    return tuple(found[0])


def generate(
    rng: random.Random, shape: Shape, givens: int, want: Technique = "any", tries: int = 200
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(puzzle, solution): a unique-solution puzzle with at most `givens` givens where digging
    gets that far (else as few as a random digging order allows) needing the technique `want`.
    ValueError after `tries` grids without one."""
    for _ in range(tries):
        solution = full_grid(rng, shape)
        puzzle = list(solution)
        order = list(range(shape.cells))
        rng.shuffle(order)
        left = shape.cells
        for cell in order:
            if left <= givens:
                break
            kept, puzzle[cell] = puzzle[cell], 0
            if count_solutions(puzzle, shape, 2) != 1:
                puzzle[cell] = kept
            else:
                left -= 1
        if want == "any" or technique(puzzle, shape) == want:
            return tuple(puzzle), solution
    raise ValueError(
        f"no {shape.side}x{shape.side} sudoku needing {want!r} with <= {givens} givens "
        f"in {tries} grids"
    )
