"""A category the state spells in one word (`"phase": "draining"`, the keys held, a list of
tags) is a feature of its own (`CS:`), so a choice it alone decides is learned; texts, grids,
lines of cells and empty strings are read their own ways and get no such flag."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.train.test_features import write_worlds
from tests.train.tiny import tiny_trm
from worker.features import explain
from worker.features.row import row_features
from worker.models.feature_space import FeatureSpace
from worker.models.trm import load_trm
from worker.train import trm
from worker.train.callbacks import TrainerCallbacks

DOOR = ["go:enter", "go:wait"]


def test_one_word_strings_and_tags_are_flags_and_texts_cells_and_blanks_are_not() -> None:
    state = {
        "phase": "Draining",
        "keys": "",
        "tags": ["vip", "beta"],
        "note": "the gate opens at noon",
        "map": ["..#", ".a.", "..."],
        "busy": ".m.m..",
        "pos": [0, 0],
    }
    flags = sorted(n for n in row_features(json.dumps(state), DOOR)[0] if n.startswith("CS:"))
    assert flags == ["CS:phase:draining", "CS:tags:beta", "CS:tags:vip"]
    assert "`phase` is `draining`" in explain("CS:phase:draining")
    # The same flags on every candidate: a context feature.
    first, second = (
        {n for n in f if n.startswith("CS:")} for f in row_features(json.dumps(state), DOOR)
    )
    assert first == second


def door_row(rng: random.Random, world: int) -> dict:
    """Enter when the door's phase is `open` or the visitor holds the `pass` tag; the numbers
    are noise drawn afresh per row, and each world spells its own extra tag."""
    phase = rng.choice(["open", "closed", "jammed"])
    tags = rng.sample(["pass", "vip", "beta", f"w{world}"], 2)
    state = {
        "door": {"phase": phase},
        "visitor": {"tags": tags},
        **{f"n{k}": rng.randint(0, 100) for k in range(6)},
    }
    enter = phase == "open" or "pass" in tags
    return {
        "state": json.dumps(state),
        "tools": DOOR,
        "action": DOOR[0] if enter else DOOR[1],
        "meta": {"env": f"w{world}"},
    }


def test_a_choice_decided_only_by_a_category_and_a_tag_is_learned_for_unseen_worlds(
    tmp_path: Path,
) -> None:
    rng = random.Random(0)
    unseen = write_worlds(tmp_path / "c", door_row, rng, 200)
    trm.train(tiny_trm(30), tmp_path / "c", tmp_path / "trm", TrainerCallbacks(), seed=0)
    read = set(FeatureSpace.load(tmp_path / "trm" / "features.json").names)
    assert {"CS:door.phase:open", "CS:visitor.tags:pass"} <= read, read
    assert not any(n.startswith("CS:visitor.tags:w") for n in read)  # a tag one world spells
    policy = load_trm(tmp_path / "trm")
    right = sum(policy.act(r["state"], r["tools"]) == r["action"] for r in unseen)
    assert right / len(unseen) >= 0.98
