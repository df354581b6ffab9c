"""Feature names (worker/features/kinds.py): one table spells them, `explain` reads them back,
the docs list the same table, and a gbdt model names its top features."""

from __future__ import annotations

import json
import random
from pathlib import Path

from worker.features import explain, row_features
from worker.features.kinds import KINDS, name, parse, table
from worker.train import gbdt

ROOT = Path(__file__).resolve().parents[2]

STATES = [
    {
        "routes": {"FAST": {"cost": 1, "tools": ["calc"]}, "SLOW": {"cost": 3, "tools": []}},
        "request": {"intent": "calc", "prompt": "Add these two numbers for me please"},
        "budget": 2,
        "queue": ["slow", "fast"],
    },
    {"map": ["..#..", ".....", "~...."], "pos": [1, 1], "goal": [4, 2]},
    {"busy": {"oven": "..#..."}, "job": {"dur": 2}},
    {
        "instance": {"budget": 4, "jobs": [{"dur": 1}, {"dur": 2}]},
        "proposal": ["a", "b"],
        "tags": {"a": "place:oven@t1", "b": "place:oven@t3"},
    },
]
TOOLS = [
    ["route:FAST", "route:SLOW"],
    ["move:north", "move:east"],
    ["place:oven@t1", "place:oven@t2"],
    ["verdict:accept", "verdict:reject"],
]


def test_the_docs_list_the_feature_kinds_table_as_the_code_declares_it() -> None:
    doc = (ROOT / "docs" / "state-rules.md").read_text()
    assert table() in doc, "docs/state-rules.md: regenerate its table from kinds.table()"


def test_every_feature_the_encoder_makes_is_explained_in_words() -> None:
    seen: set[str] = set()
    for state, tools in zip(STATES, TOOLS, strict=True):
        for features in row_features(json.dumps(state), tools):
            seen |= set(features)
    unexplained = [n for n in seen if parse(n) is None]
    assert not unexplained, unexplained[:5]
    prefixes = {n.split(":", 1)[0] for n in seen}
    expected = {"A", "R", "D", "GE", "W", "TN", "WIN", "VD", "IDX", "AT", "RUN", "PMIN", "X"}
    assert expected <= prefixes, expected - prefixes
    assert all(k.example.startswith(k.prefix) and parse(k.example) for k in KINDS)
    assert explain("D:A:routes.*.cost|budget") == (
        "(the candidate's own number `routes.*.cost`), minus the context number `budget`"
    )


def test_a_gbdt_model_lists_its_top_features_by_name_and_in_words() -> None:
    rng = random.Random(0)
    rows = []
    for i in range(120):
        costs = {"FAST": rng.randint(1, 9), "SLOW": rng.randint(1, 9)}
        state = {"routes": {k: {"cost": v} for k, v in costs.items()}, "budget": 5}
        tools = ["route:FAST", "route:SLOW"]
        cheap = min(costs, key=lambda k: (costs[k], k))
        rows.append(
            {
                "state": json.dumps(state),
                "tools": tools,
                "action": f"route:{cheap}",
                "env": f"w{i % 3}",
            }
        )
    booster, space, info = gbdt.fit(rows[:90], rows[90:], {"n_estimators": 20}, seed=0)
    assert all(c.replace("_", "").isalnum() for c in space.columns)
    assert len(set(space.columns)) == len(space.columns)
    assert booster.feature_name() == space.columns  # not Column_0, Column_1, ...
    top = info["top_features"]
    assert top and top[0]["feature"] in space.names and "routes.*.cost" in top[0]["feature"]
    assert "cost" in top[0]["meaning"]


def test_a_remembered_name_is_spelled_as_its_parts_are_whatever_was_asked_first() -> None:
    # Names are remembered (kinds.name is cached): 1 and 1.0 are equal keys to a plain cache
    # but spell different names, so an integer id number never takes a float's name.
    assert name("D", "N:0", 1.0) == "D:N:0|1.0" and name("D", "N:0", 1) == "D:N:0|1"
    assert name("N", True) == "N:True" and name("N", 1) == "N:1"
