"""The paper-scale puzzle configs (specs/puzzles/*.json) are ones the bench can run: their
trainer knobs pass the bounds, their puzzles are of a known family, and the network they build
is the paper's size (5M parameters for the Sudoku MLP, 7M for the maze attention model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.schemas.puzzles import GridTrainerConfig
from worker.models.trm_grid import GridTRM
from worker.puzzles import PUZZLES

SPECS = Path(__file__).resolve().parents[2] / "specs" / "puzzles"
PAPER_PARAMETERS = {"sudoku-extreme": 5e6, "maze-hard": 7e6}


@pytest.mark.parametrize("name", sorted(PAPER_PARAMETERS))
def test_a_paper_scale_config_builds_the_papers_size(name: str) -> None:
    spec = json.loads((SPECS / f"{name}.json").read_text())
    kind = PUZZLES[spec["family"]]
    params = kind.params(**spec["params"])
    config = GridTrainerConfig(**spec["trainer"])
    model = GridTRM(config, kind.vocab(params), params.side * params.side)
    count = sum(p.numel() for p in model.parameters())
    assert 0.8 * PAPER_PARAMETERS[name] <= count <= 1.1 * PAPER_PARAMETERS[name], count
