"""Whole-answer puzzles for the grid trm (`worker/models/trm_grid.py`): a grid of tokens in, a
grid of the same shape out, every answer checked by an oracle.

- `sudoku`: generator (unique solution, dug to few givens), a search solver that counts
  solutions, a singles-only solver that tells the technique a puzzle needs, the checker.
- `maze`: generator (random or carved walls, a unique long shortest path), BFS oracle, checker.
- `augment`: permutations of cells and tokens that keep an answer valid.
- `sets`: the family registry (`PUZZLES`), `generate_set`, and `PuzzleSet` (arrays + files).
"""

from worker.puzzles import augment, maze, sudoku
from worker.puzzles.sets import (
    PUZZLES,
    MazeParams,
    Params,
    PuzzleFamily,
    PuzzleSet,
    SudokuParams,
    generate_set,
)

__all__ = [
    "PUZZLES",
    "MazeParams",
    "Params",
    "PuzzleFamily",
    "PuzzleSet",
    "SudokuParams",
    "augment",
    "generate_set",
    "maze",
    "sudoku",
]
