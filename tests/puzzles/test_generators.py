"""The puzzle generators make what they promise: unique solutions, the asked technique and
givens, long unique maze paths; the oracles reject wrong answers; augmentation keeps every
answer valid."""

from __future__ import annotations

import numpy as np
import pytest

from worker.puzzles import PUZZLES, MazeParams, SudokuParams, generate_set, maze, sudoku
from worker.puzzles.augment import identity


@pytest.mark.parametrize("side,givens", [(6, 10), (9, 26)])
def test_sudoku_puzzles_have_one_solution_and_few_givens(side: int, givens: int) -> None:
    shape = sudoku.SHAPES[side]
    made = generate_set("sudoku", SudokuParams(side, givens, "any"), 6, seed=1)
    for puzzle, answer in zip(made.inputs, made.labels, strict=True):
        assert sudoku.count_solutions(tuple(puzzle), shape, limit=3) == 1
        assert sudoku.solve(tuple(puzzle), shape) == tuple(answer)
        # Dug until `givens` remain, or until no blank keeps the solution unique.
        assert int((puzzle > 0).sum()) <= givens + 3


def test_sudoku_technique_is_the_one_asked() -> None:
    shape = sudoku.SHAPES[9]
    hard = generate_set("sudoku", SudokuParams(9, 24, "search"), 3, seed=2)
    easy = generate_set("sudoku", SudokuParams(9, 34, "singles"), 3, seed=2)
    for puzzle in hard.inputs:
        assert sudoku.solve_singles(tuple(puzzle), shape) is None
        assert sudoku.solve(tuple(puzzle), shape) is not None
    for puzzle, answer in zip(easy.inputs, easy.labels, strict=True):
        assert sudoku.solve_singles(tuple(puzzle), shape) == tuple(answer)


def test_sudoku_checker_rejects_a_wrong_or_unfaithful_answer() -> None:
    made = generate_set("sudoku", SudokuParams(6, 10, "any"), 1, seed=3)
    params, puzzle, answer = made.params, made.inputs[0], made.labels[0]
    assert PUZZLES["sudoku"].check(params, puzzle, answer)
    swapped = answer.copy()
    swapped[[0, 1]] = swapped[[1, 0]]  # two cells of a row swapped: a column breaks
    assert not PUZZLES["sudoku"].check(params, puzzle, swapped)
    relabelled = np.array([0, 2, 1, 3, 4, 5, 6])[answer]  # valid grid, but not the givens'
    assert not PUZZLES["sudoku"].check(params, puzzle, relabelled)


@pytest.mark.parametrize(
    "params",
    [
        MazeParams(10, 0.4, 20, "random"),
        MazeParams(11, 0.4, 24, "carved"),
        MazeParams(30, 0.48, 110, "carved"),
    ],
)
def test_mazes_have_a_unique_shortest_path_of_the_asked_length(params: MazeParams) -> None:
    made = generate_set("maze", params, 4, seed=4)
    for puzzle, answer in zip(made.inputs, made.labels, strict=True):
        length, ways = maze.shortest_paths(tuple(puzzle), params.side)
        assert length >= params.min_path and ways == 1
        assert int((answer == maze.PATH).sum()) == length - 1
        assert maze.is_solution(tuple(puzzle), tuple(answer), params.side)


def test_maze_checker_rejects_a_broken_or_long_path() -> None:
    made = generate_set("maze", MazeParams(10, 0.35, 16, "random"), 1, seed=5)
    puzzle, answer = made.inputs[0], made.labels[0]
    broken = answer.copy()
    broken[np.flatnonzero(answer == maze.PATH)[0]] = maze.OPEN
    assert not maze.is_solution(tuple(puzzle), tuple(broken), 10)
    longer = answer.copy()
    longer[np.flatnonzero(puzzle == maze.OPEN & (answer != maze.PATH))[:1]] = maze.PATH
    assert not maze.is_solution(tuple(puzzle), tuple(longer), 10)
    assert not maze.is_solution(tuple(puzzle), tuple(puzzle), 10)  # nothing marked


@pytest.mark.parametrize(
    "family,params",
    [
        ("sudoku", SudokuParams(9, 26, "any")),
        ("sudoku", SudokuParams(6, 10, "any")),
        ("maze", MazeParams(10, 0.4, 18, "random")),
    ],
)
def test_every_augmented_puzzle_still_checks(
    family: str, params: SudokuParams | MazeParams
) -> None:
    made = generate_set(family, params, 4, seed=6)
    kind, draw = PUZZLES[family], PUZZLES[family].augmenter(params)
    gen = np.random.default_rng(0)
    changed = 0
    for _ in range(50):
        aug = draw(gen)
        puzzles, answers = aug.apply(made.inputs), aug.apply(made.labels)
        changed += int((puzzles != made.inputs).any())
        for p, a in zip(puzzles, answers, strict=True):
            assert kind.check(params, p, a)
    assert changed >= 35  # augmentation changes them (a maze: 7 symmetries in 8 do)


def test_a_set_is_reproducible_and_its_prefix_is_a_smaller_set(tmp_path) -> None:
    params = SudokuParams(6, 10, "any")
    big, small = generate_set("sudoku", params, 8, seed=7), generate_set("sudoku", params, 3, 7)
    assert (big.inputs[:3] == small.inputs).all()
    assert len({tuple(p) for p in big.inputs}) == 8
    big.save(tmp_path)
    back = type(big).load(tmp_path)
    assert back.params == params and (back.labels == big.labels).all()
    assert identity(36, 7).apply(back.inputs).tolist() == big.inputs.tolist()


def test_a_set_drawn_by_two_processes_is_the_same_set(tmp_path) -> None:
    from worker.puzzles.__main__ import main

    params = MazeParams(8, 0.4, 12, "random")
    assert (
        main(
            [
                "maze",
                "--side",
                "8",
                "--wall-share",
                "0.4",
                "--min-path",
                "12",
                "--style",
                "random",
                "--count",
                "6",
                "--jobs",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    saved = type(generate_set("maze", params, 1, 0)).load(tmp_path)
    assert saved.params == params
    assert (saved.inputs == generate_set("maze", params, 6, seed=0).inputs).all()
