"""Text and grids in a state (worker/features/text.py, cells.py): a decision that only a prompt's
words, a question's match with a tool's description, or the cells around an agent can make."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.train.test_features import write_worlds
from tests.train.tiny import tiny_trm
from worker.evaluate.policies import load_policy
from worker.models.feature_space import row_features
from worker.models.policy import argmax
from worker.train import gbdt, trm
from worker.train.callbacks import TrainerCallbacks

# 5 epochs: the trm learned both tests' decisions (val and held out 1.0) in the first.
TINY = tiny_trm(epochs=5)
FILLER = [
    "please",
    "could",
    "you",
    "help",
    "me",
    "with",
    "my",
    "request",
    "today",
    "about",
    "the",
    "thing",
    "we",
    "discussed",
]
HARD = ["prove", "theorem", "derive", "optimize", "refactor", "integral"]
EASY = ["hello", "thanks", "weather", "joke", "greeting", "recipe"]


def accuracy(folder: Path, kind: str, rows: list[dict[str, Any]]) -> float:
    policy = load_policy({"type": kind, "path": str(folder)})
    scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    right = [r["tools"][argmax(s)] == r["action"] for r, s in zip(rows, scores, strict=True)]
    return sum(right) / len(rows)


def prompt_row(rng: random.Random, world: int) -> dict[str, Any]:
    """Route to `b` when the request asks for hard work, else to `a`: only its words say which.
    Long and short requests alike (64 characters was where strings stopped being read)."""
    hard = rng.random() < 0.5
    words = rng.sample(FILLER, rng.randint(2, 12)) + [rng.choice(HARD if hard else EASY)]
    rng.shuffle(words)
    return {
        "state": json.dumps({"request": " ".join(words)}),
        "tools": ["a", "b"],
        "action": "b" if hard else "a",
        "env": f"w{world}",
    }


def test_a_routing_decided_only_by_the_prompts_words_is_learned_by_both_learners(
    tmp_path: Path,
) -> None:
    rng = random.Random(0)
    held_out = write_worlds(tmp_path / "c", prompt_row, rng, 100)
    assert any(len(json.loads(r["state"])["request"]) > 64 for r in held_out)
    assert any(len(json.loads(r["state"])["request"]) <= 64 for r in held_out)
    gbdt.train({}, tmp_path / "c", tmp_path / "gbdt", TrainerCallbacks(), seed=0)
    trm.train(TINY, tmp_path / "c", tmp_path / "trm", TrainerCallbacks(), seed=0)
    assert accuracy(tmp_path / "gbdt", "gbdt", held_out) == 1.0
    assert accuracy(tmp_path / "trm", "trm", held_out) == 1.0


def pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))


def function_row(rng: random.Random, world: int) -> dict[str, Any]:
    """Pick the function whose description the question speaks of, among four whose names (and
    description words) are drawn fresh for every row: no tool is ever seen twice."""
    functions, topics = [], []
    for _ in range(4):
        topic = [pseudo_word(rng) for _ in range(3)]
        topics.append(topic)
        functions.append(
            {
                "name": f"{pseudo_word(rng)}_{pseudo_word(rng)}",
                "description": f"Returns the {topic[0]} {topic[1]} for a given {topic[2]}",
                "parameters": {
                    "type": "object",
                    "properties": {
                        topic[2]: {"type": "string", "description": f"The {topic[2]} to look up"}
                    },
                },
            }
        )
    right = rng.randrange(4)
    said = rng.sample(topics[right], 2)  # two of its three topic words, in any order
    question = f"What is the {said[0]} {said[1]} please, I need it soon?"
    state = {"question": question, "functions": functions}
    tools = [f["name"] for f in functions]
    return {"state": json.dumps(state), "tools": tools, "action": tools[right], "env": f"w{world}"}


def test_a_question_is_matched_with_the_function_it_describes_among_tools_never_seen() -> None:
    rng = random.Random(1)
    rows = [function_row(rng, w % 4) for w in range(160)]
    held_out = [function_row(rng, 9) for _ in range(100)]
    names = {t for r in rows for t in r["tools"]}
    assert not names & {t for r in held_out for t in r["tools"]}
    booster, space, _ = gbdt.fit(rows[:120], rows[120:], {}, seed=0)
    policy = gbdt.gbdt.GbdtPolicy(booster, space, "gbdt", "")
    scores = policy.scores_batch([r["state"] for r in held_out], [r["tools"] for r in held_out])
    right = [r["tools"][argmax(s)] == r["action"] for r, s in zip(held_out, scores, strict=True)]
    assert sum(right) / len(right) >= 0.9  # chance is 0.25
    (features,) = row_features(held_out[0]["state"], [held_out[0]["action"]])
    assert "TO:functions.*.description|question" in features


def test_tools_naming_their_parameters_differently_are_matched_on_the_same_columns() -> None:
    """A parameter's description is matched in its tool's whole bag: a column per parameter path
    (`functions.*.parameters.properties.city.description`) would be one per name a tool gave."""

    def tool(name: str, what: str, param: str, about: str) -> dict[str, Any]:
        return {
            "name": name,
            "description": what,
            "parameters": {"properties": {param: {"description": about}}},
        }

    columns = []
    for param in ("city", "loc"):
        weather_tool = tool("get_weather", "Look up the forecast", param, "the town")
        mail_tool = tool("send_mail", "Send a letter", "to", "whom it goes to")
        state = {
            "question": "What is the forecast for my town?",
            "functions": [weather_tool, mail_tool],
        }
        weather, _ = row_features(json.dumps(state), ["get_weather", "send_mail"])
        columns.append({n for n in weather if n.startswith(("TO:", "TCOS:"))})
        assert weather["TO:functions.*|question"] > 0  # "town" is found, in the root's bag
    assert (
        columns[0]
        == columns[1]
        == {
            "TO:functions.*|question",
            "TO:functions.*.description|question",
            "TCOS:functions.*|question",
            "TCOS:functions.*.description|question",
        }
    )


def test_texts_shorter_and_longer_than_64_characters_are_both_read() -> None:
    state = {"short": "Book a table", "long": "Book a table for four " + "x" * 60, "note": "x" * 80}
    (features,) = row_features(json.dumps(state), ["go"])
    assert features["W:short:book"] == 1.0 and features["W:long:book table"] == 1.0
    assert features["TS:long:words"] == 5.0 and "W:note:" + "x" * 80 in features
    (plain,) = row_features("not json, just a sentence about weather", ["go"])
    assert plain["W:text:weather"] == 1.0


def test_the_cells_around_a_position_tell_apart_maps_whose_lines_are_the_same_set() -> None:
    """Both maps hold the lines `#...` and `....`; only their order puts a wall north of the
    agent at (0, 1). The set of lines (all an earlier encoding read) is the same."""
    walled = {"map": ["#...", "....", "...."], "pos": [0, 1]}
    open_ = {"map": ["....", "#...", "...."], "pos": [0, 1]}
    tools = ["move:north", "move:south"]
    (a, _), (b, _) = (row_features(json.dumps(s), tools) for s in (walled, open_))
    assert a["WIN:map@pos:0,-1:#"] == 1.0 and "WIN:map@pos:0,-1:." not in a
    assert b["WIN:map@pos:0,-1:."] == 1.0 and b["WIN:map@pos:-1,0:out"] == 1.0
    marked = {"map": ["....", "..A.", "...."]}  # a symbol that occurs once is an anchor itself
    (c, _) = row_features(json.dumps(marked), tools)
    assert c["WIN:map@=A:1,0:."] == 1.0 and c["WIN:map@=A:0,-2:out"] == 1.0


def test_a_list_of_ids_is_not_read_as_a_grid_and_keeps_its_order() -> None:
    state = {"after": ["op1", "op3", "op4"], "queue": ["slow", "fast", "slow"]}
    tools = ["fast", "slow"]
    fast, slow = row_features(json.dumps(state), tools)
    assert not any(n.startswith("WIN:") for n in fast)
    assert fast["IDX:queue"] == 1.0 and slow["IDX:queue"] == 0.0 and slow["IDXE:queue"] == 0.0
