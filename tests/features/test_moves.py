"""Moves on a grid (worker/features/cells.py): a candidate whose id names a direction reads the
cell it enters and the cells near it, in its own frame; a list of moves is walked on the grid."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.features.test_text import TINY, accuracy
from tests.train.test_features import write_worlds
from worker.features.cells import direction_of
from worker.features.kinds import explain
from worker.features.row import row_features
from worker.train import trm
from worker.train.callbacks import TrainerCallbacks

MAP = ["#.~#.~..", "...#.~.#", "..a#....", ".###....", "...A....", "...#...."]


def test_a_candidate_names_a_direction_in_compass_or_screen_words() -> None:
    assert direction_of("move:north") == (0, -1) and direction_of("go_up") == (0, -1)
    assert direction_of("RIGHT") == (1, 0) and direction_of("step-west") == (-1, 0)
    assert direction_of("north_east") == (1, -1)
    assert direction_of("wait") is None and direction_of("setup") is None
    assert direction_of("place:oven@t3") is None and direction_of("left_right") is None


def test_each_move_reads_the_cell_it_enters_in_its_own_frame() -> None:
    state = json.dumps({"map": MAP, "pos": [2, 3], "goal": [6, 3], "keys": "a"})
    west, north, east, wait = row_features(state, ["move:west", "go_up", "E:east", "wait"])
    # West from (2, 3) enters the wall at (1, 3); the floor at (0, 3) lies one cell past it.
    assert west["GO:map@pos:0,0:#"] == 1.0 and west["GO:map@pos:0,1:."] == 1.0
    # North enters the key `a` at (2, 2); to its right (east) the wall at (3, 2).
    assert north["GO:map@pos:0,0:a"] == 1.0 and north["GO:map@pos:1,0:#"] == 1.0
    # East enters the wall at (3, 3); to its right (south) the door `A` at (3, 4).
    assert east["GO:map@pos:0,0:#"] == 1.0 and east["GO:map@pos:1,0:A"] == 1.0
    # Nearer to the goal only going east; the key held is the symbol north enters.
    assert east["GOD:map@pos|goal"] == -1.0 and west["GOD:map@pos|goal"] == 1.0
    assert north["GOHAS:map@pos|keys"] == 1.0 and "GOHAS:map@pos|keys" not in west
    assert not any(k.startswith("GO") for k in wait)
    assert "`#` `0` cells ahead" in explain("GO:map@pos:0,0:#")
    assert "nearer" in explain("GOD:map@pos|goal")


def test_a_list_of_moves_is_walked_on_the_grid_with_directions_its_items_key() -> None:
    arrives = {
        "map": MAP,
        "pos": [4, 1],
        "goal": [6, 3],
        "plan": ["e", "s", "s", "e"],
        "tags": {"e": "move:east", "s": "move:south"},
    }
    blocked = {**arrives, "plan": ["s", "s", "s", "w"], "tags": {"s": "move:south", "w": "left"}}
    a = row_features(json.dumps(arrives), ["accept", "reject"])[0]
    b = row_features(json.dumps(blocked), ["accept", "reject"])[0]
    # (4,1) -> (5,1) `~` -> (5,2) -> (5,3) -> (6,3): at the goal, through one pit.
    assert a["WALKD:map@pos|plan|goal"] == 0.0 and a["WALK:map@pos|plan:~"] == 1.0
    assert a["WALK:map@pos|plan:."] == 3.0 and "WALK:map@pos|plan:#" not in a
    # (4,1) -> (4,2) -> (4,3) -> (4,4) -> (3,4) the door: four steps from the goal.
    assert b["WALKD:map@pos|plan|goal"] == 4.0 and b["WALK:map@pos|plan:A"] == 1.0
    assert "walked on the grid `map`" in explain("WALK:map@pos|plan:A")


def coin_row(rng: random.Random, world: int) -> dict[str, Any]:
    """Step onto the one coin `$` beside the agent: a map drawn fresh for every row, the coin on
    a random side, the moves offered in any order and spelling. Only the cell each move enters
    says which; a window around the agent says it only crossed with the move's direction."""
    width, height = 7, 6
    cells = [[rng.choice("..#") for _ in range(width)] for _ in range(height)]
    x, y = rng.randrange(1, width - 1), rng.randrange(1, height - 1)
    cells[y][x] = "."
    spellings = rng.choice([("north", "south", "east", "west"), ("up", "down", "right", "left")])
    moves = dict(zip(spellings, [(0, -1), (0, 1), (1, 0), (-1, 0)], strict=True))
    right = rng.choice(list(moves))
    dx, dy = moves[right]
    cells[y + dy][x + dx] = "$"
    tools = [f"move:{m}" for m in moves]
    rng.shuffle(tools)
    state = {"map": ["".join(row) for row in cells], "pos": [x, y]}
    return {
        "state": json.dumps(state),
        "tools": tools,
        "action": f"move:{right}",
        "env": f"w{world}",
    }


def test_a_choice_decided_only_by_the_cell_a_move_enters_is_learned(tmp_path: Path) -> None:
    rng = random.Random(0)
    held_out = write_worlds(tmp_path / "c", coin_row, rng, 100)
    trm.train(TINY, tmp_path / "c", tmp_path / "trm", TrainerCallbacks(), seed=0)
    assert accuracy(tmp_path / "trm", "trm", held_out) == 1.0
