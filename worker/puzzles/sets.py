"""Puzzle families and sets: what `sudoku` and `maze` take, how a set of them is generated,
checked and stored.

A `PuzzleSet` is puzzles and their answers as token arrays (rows x cells) with the family's
parameters; every answer was checked by the family's oracle as it was made. `generate_set` is a
function of (family, params, count, seed) alone: puzzle `i` comes from its own seeded stream, so
a set of 100 is the first 100 of a set of 1000. Duplicates are skipped.

Files: `puzzles.npz` (inputs, labels) and `puzzles.json` (family, params, count), written whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from io import BytesIO
from pathlib import Path
from typing import Literal

import numpy as np

from core.rundir import write_bytes_atomic, write_json_atomic
from core.schemas.puzzles import PUZZLE_ARRAYS, PUZZLE_META
from worker.envs.base import seeded_rng
from worker.puzzles import augment, maze, sudoku

Family = Literal["sudoku", "maze"]


@dataclass(frozen=True, slots=True)
class SudokuParams:
    """`side` 9 (3x3 boxes), 6 (2x3) or 4 (2x2); dig down to `givens` givens; `technique` the
    one the puzzle must need (`singles`, `search`, `any`)."""

    side: int = 9
    givens: int = 24
    technique: sudoku.Technique = "search"


@dataclass(frozen=True, slots=True)
class MazeParams:
    """A `side` x `side` maze, walls on `wall_share` of the cells (`style` random or carved), a
    unique shortest path of at least `min_path` moves."""

    side: int = 30
    wall_share: float = 0.48
    min_path: int = 110
    style: maze.Style = "carved"


Params = SudokuParams | MazeParams


@dataclass(frozen=True, slots=True)
class PuzzleFamily:
    name: Family
    summary: str
    params: type[SudokuParams] | type[MazeParams]

    def side(self, params: Params) -> int:
        return params.side

    def vocab(self, params: Params) -> int:
        return params.side + 1 if isinstance(params, SudokuParams) else maze.VOCAB

    def make(self, params: Params, rng_seed: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        rng = seeded_rng(rng_seed)
        if isinstance(params, SudokuParams):
            shape = sudoku.SHAPES[params.side]
            return sudoku.generate(rng, shape, params.givens, params.technique)
        return maze.generate(rng, params.side, params.wall_share, params.min_path, params.style)

    def check(self, params: Params, puzzle: np.ndarray, answer: np.ndarray) -> bool:
        """The oracle: whether `answer` solves `puzzle`."""
        p, a = tuple(int(t) for t in puzzle), tuple(int(t) for t in answer)
        if isinstance(params, SudokuParams):
            return sudoku.is_solution(p, a, sudoku.SHAPES[params.side])
        return maze.is_solution(p, a, params.side)

    def augmenter(self, params: Params) -> Callable[[np.random.Generator], augment.Augmentation]:
        """A random answer-keeping augmentation per call."""
        vocab = self.vocab(params)

        def draw(gen: np.random.Generator) -> augment.Augmentation:
            rng = seeded_rng("augment", int(gen.integers(1 << 62)))
            if isinstance(params, SudokuParams):
                return augment.sudoku(rng, sudoku.SHAPES[params.side])
            return augment.maze(rng, params.side, vocab)

        return draw


PUZZLES: dict[str, PuzzleFamily] = {
    "sudoku": PuzzleFamily(
        "sudoku",
        "fill a 9x9 (or 6x6) sudoku with a unique solution, dug to few givens; hard ones need "
        "search, not singles (a whole-answer task for the grid trm)",
        SudokuParams,
    ),
    "maze": PuzzleFamily(
        "maze",
        "mark the shortest path from S to G on a square maze (unique, and long for its size; "
        "30x30 with paths over 110 moves as in Maze-Hard)",
        MazeParams,
    ),
}


@dataclass
class PuzzleSet:
    family: Family
    params: Params
    inputs: np.ndarray  # (puzzles, cells) int64 tokens
    labels: np.ndarray  # (puzzles, cells) int64 tokens: the checked answers

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def kind(self) -> PuzzleFamily:
        return PUZZLES[self.family]

    @property
    def side(self) -> int:
        return self.params.side

    @property
    def vocab(self) -> int:
        return self.kind.vocab(self.params)

    def take(self, rows: slice) -> PuzzleSet:
        return PuzzleSet(self.family, self.params, self.inputs[rows], self.labels[rows])

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        buf = BytesIO()
        np.savez_compressed(buf, inputs=self.inputs, labels=self.labels)
        write_bytes_atomic(folder / PUZZLE_ARRAYS, buf.getvalue())
        meta = {"family": self.family, "params": asdict(self.params), "count": len(self)}
        write_json_atomic(folder / PUZZLE_META, meta)

    @classmethod
    def load(cls, folder: Path) -> PuzzleSet:
        meta = json.loads((folder / PUZZLE_META).read_text())
        family = PUZZLES[meta["family"]]
        with np.load(folder / PUZZLE_ARRAYS) as arrays:
            inputs, labels = arrays["inputs"].astype(np.int64), arrays["labels"].astype(np.int64)
        return cls(family.name, family.params(**meta["params"]), inputs, labels)


def _make_checked(job: tuple[str, Params, str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    family, params, stream = job
    kind = PUZZLES[family]
    puzzle, answer = kind.make(params, stream)
    if not kind.check(params, np.array(puzzle), np.array(answer)):
        raise AssertionError(f"{family} generator made an answer its oracle rejects ({stream})")
    return puzzle, answer


def generate_set(family: str, params: Params, count: int, seed: int, jobs: int = 1) -> PuzzleSet:
    """`count` distinct checked puzzles of `family`; puzzle i drawn from its own stream, so the
    set is the same whatever `jobs` (processes drawing at once) is."""
    if family not in PUZZLES:
        raise KeyError(f"unknown puzzle family {family!r}; known: {', '.join(PUZZLES)}")
    kind = PUZZLES[family]
    seen: set[tuple[int, ...]] = set()
    inputs: list[tuple[int, ...]] = []
    labels: list[tuple[int, ...]] = []
    index = 0
    pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
    try:
        while len(inputs) < count:
            wanted = count - len(inputs)
            streams = [f"puzzle|{family}|{seed}|{i}" for i in range(index, index + wanted)]
            batch = [(family, params, stream) for stream in streams]
            index += wanted
            made = (
                pool.map(_make_checked, batch, chunksize=8) if pool else map(_make_checked, batch)
            )
            for puzzle, answer in made:
                if puzzle not in seen and len(inputs) < count:
                    seen.add(puzzle)
                    inputs.append(puzzle)
                    labels.append(answer)
    finally:
        if pool:
            pool.shutdown()
    return PuzzleSet(kind.name, params, np.array(inputs, np.int64), np.array(labels, np.int64))
