"""A trm_grid run's corpus (worker/corpus/puzzles.py) and work estimate (core/schemas/puzzles.py):
every puzzle accounted for, held-out anchors never trained on, a bad set refused naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.schemas.corpus import CorpusSpec
from core.schemas.puzzles import GridTrainerConfig, grid_work, puzzle_shape
from worker.corpus import CorpusInputError
from worker.corpus.puzzles import build_puzzle_corpus
from worker.models.trm_grid import GridTRM
from worker.puzzles import MazeParams, PuzzleSet, SudokuParams, generate_set


def corpus(*sources: dict[str, Any], **split: Any) -> CorpusSpec:
    return CorpusSpec.model_validate({"sources": list(sources), "split": split})


def source(name: str, path: Path, **extra: Any) -> dict[str, Any]:
    return {"type": "puzzles", "name": name, "path": str(path), **extra}


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sets") / "sudoku4"
    generate_set("sudoku", SudokuParams(4, 6, "any"), 50, seed=0).save(folder)
    return folder


def test_every_puzzle_is_split_once_and_anchors_are_held_out(sudoku4: Path, tmp_path: Path) -> None:
    result = build_puzzle_corpus(corpus(source("s", sudoku4, anchor_share=0.2)), tmp_path)
    parts = {name: PuzzleSet.load(tmp_path / name) for name in ("train", "val", "anchor")}
    assert {k: len(v) for k, v in parts.items()} == {"train": 32, "val": 8, "anchor": 10}
    seen = [row.tobytes() for made in parts.values() for row in made.inputs]
    assert len(seen) == len(set(seen)) == 50  # no puzzle in two splits, none lost
    assert result.counters["rows_read"] == 50 and result.counters["duplicates"] == 0
    again = build_puzzle_corpus(corpus(source("s", sudoku4, anchor_share=0.2)), tmp_path / "b")
    assert again.corpus_hash == result.corpus_hash  # the same spec, the same corpus


def test_a_rejected_answer_and_a_repeated_puzzle_are_counted_not_trained_on(
    sudoku4: Path, tmp_path: Path
) -> None:
    made = PuzzleSet.load(sudoku4)
    made.labels[3] = made.labels[4]  # an answer that does not solve its puzzle
    made.save(tmp_path / "edited")
    spec = corpus(source("a", tmp_path / "edited"), source("b", sudoku4, limit=5))
    result = build_puzzle_corpus(spec, tmp_path / "out")
    # b's first five repeat a's, but a's puzzle 3 was rejected: b's right copy of it is kept.
    assert result.counters["rows_invalid"] == 1 and result.counters["duplicates"] == 4
    assert result.counters["train"] + result.counters["val"] + result.counters["anchor"] == 50
    assert "oracle rejects" in result.warnings[0]


def test_a_source_named_as_anchor_is_held_out_whole(sudoku4: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    generate_set("sudoku", SudokuParams(4, 6, "any"), 60, seed=7).save(other)
    spec = corpus(source("train", sudoku4), source("test", other), anchor=["test"])
    result = build_puzzle_corpus(spec, tmp_path / "out")
    per_source = {s["name"]: s for s in result.manifest["sources"]}
    assert per_source["test"]["anchor"] == per_source["test"]["kept"]
    assert per_source["test"]["train"] == per_source["test"]["val"] == 0


def test_sets_of_another_family_or_no_set_are_refused_naming_the_source(
    sudoku4: Path, tmp_path: Path
) -> None:
    maze = tmp_path / "maze"
    generate_set("maze", MazeParams(6, 0.3, 6, "random"), 5, seed=0).save(maze)
    with pytest.raises(CorpusInputError, match="one model reads one family") as mixed:
        build_puzzle_corpus(corpus(source("s", sudoku4), source("m", maze)), tmp_path / "o")
    assert mixed.value.field == "sources[1].path"
    with pytest.raises(CorpusInputError, match="holds no puzzle set") as empty:
        build_puzzle_corpus(corpus(source("s", tmp_path)), tmp_path / "o")
    assert empty.value.field == "sources[0].path" and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("knobs", "cells", "vocab"),
    [
        ({"hidden": 64}, 36, 7),
        ({"hidden": 32, "mixer": "attention", "heads": 4}, 64, 5),
        ({"hidden": 32, "mixer": "conv"}, 121, 5),
    ],
)
def test_the_estimate_counts_the_models_parameters(
    knobs: dict[str, Any], cells: int, vocab: int
) -> None:
    config = GridTrainerConfig(**knobs)
    model = GridTRM(config, vocab, cells)
    assert grid_work(config, cells, vocab).parameters == sum(p.numel() for p in model.parameters())


def test_the_shape_read_from_a_sets_file_is_the_models(sudoku4: Path) -> None:
    made = PuzzleSet.load(sudoku4)
    meta = {"family": "sudoku", "params": {"side": 4}}
    assert puzzle_shape(meta) == (made.inputs.shape[1], made.vocab)
    assert puzzle_shape({"family": "maze", "params": {"side": 8}}) == (64, 5)
    assert np.all(made.inputs < made.vocab)
