"""The trm's linear text part (`wide`): it reads the rare words the feature space leaves out,
and every forward (torch, numpy, an exported controller) answers with it the same."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.train.tiny import tiny_trm
from worker.decide.controller import DecideRow, load_controller
from worker.decide.export import export_controller, run_exported
from worker.decide.numpy_trm import NumpyTrm, pad
from worker.evaluate.policies import load_policy
from worker.features.wide import BUCKETS, READING, wide_terms
from worker.models.encoding import raw_matrix, scaled_matrix
from worker.models.policy import argmax
from worker.models.trm import load_trm
from worker.train import trm
from worker.train.callbacks import TrainerCallbacks

TINY = tiny_trm(epochs=20)
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
    "thing",
    "we",
    "discussed",
    "soon",
]
WORLDS = 4


def keywords(world: int) -> tuple[list[str], list[str]]:
    """Each world's own words for hard and easy work: a word one world alone uses is below the
    feature space's floors (half the train worlds), so only the linear part reads it."""
    rng = random.Random(f"words-{world}")
    drawn = [
        "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(4))
        for _ in range(6)
    ]
    return drawn[:3], drawn[3:]


def prompt_row(rng: random.Random, world: int) -> dict[str, Any]:
    hard = rng.random() < 0.5
    hard_words, easy_words = keywords(world)
    words = rng.sample(FILLER, rng.randint(3, 8)) + [rng.choice(hard_words if hard else easy_words)]
    rng.shuffle(words)
    return {
        "state": json.dumps({"request": " ".join(words)}),
        "tools": ["a", "b"],
        "action": "b" if hard else "a",
        "meta": {"env": f"w{world}"},
    }


def write(root: Path, split: str, rows: list[dict[str, Any]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def accuracy(folder: Path, rows: list[dict[str, Any]]) -> float:
    policy = load_policy({"type": "trm", "path": str(folder)})
    scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    right = [r["tools"][argmax(s)] == r["action"] for r, s in zip(rows, scores, strict=True)]
    return sum(right) / len(rows)


def corpus(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    rng = random.Random(0)
    write(tmp_path / "c", "train", [prompt_row(rng, w % WORLDS) for w in range(320)])
    write(tmp_path / "c", "val", [prompt_row(rng, w % WORLDS) for w in range(60)])
    return tmp_path / "c", [prompt_row(rng, w % WORLDS) for w in range(120)]


def test_words_each_world_uses_alone_are_learned_by_the_linear_text_part_only(
    tmp_path: Path,
) -> None:
    folder, held_out = corpus(tmp_path)
    trm.train(TINY, folder, tmp_path / "plain", TrainerCallbacks(), seed=0)
    trm.train({**TINY, "wide": 10.0}, folder, tmp_path / "wide", TrainerCallbacks(), seed=0)
    assert accuracy(tmp_path / "plain", held_out) < 0.8
    assert accuracy(tmp_path / "wide", held_out) == 1.0


@pytest.mark.parametrize("buckets,before", [(None, False), (4096, True)])
def test_the_numpy_forward_and_the_service_decide_as_the_torch_model_with_the_text_part(
    tmp_path: Path, buckets: int | None, before: bool
) -> None:
    """`before`: a model trained before `wide_reading` (its config without it) is read as it
    was trained, by reading 1, everywhere."""
    folder, held_out = corpus(tmp_path)
    out = tmp_path / "wide"
    sized = {} if buckets is None else {"wide_buckets": buckets}
    config = {**TINY, "wide": 10.0, "epochs": 3, **sized, "wide_reading": 1 if before else 2}
    trm.train(config, folder, out, TrainerCallbacks(), seed=0)
    if before:
        saved = json.loads((out / "config.json").read_text())
        del saved["config"]["wide_reading"]
        (out / "config.json").write_text(json.dumps(saved))
    policy = load_trm(out, "cpu")
    assert policy.model.wide_reading == (1 if before else READING)
    states, tools = [r["state"] for r in held_out], [r["tools"] for r in held_out]
    torch_scores = np.array(policy.scores_batch(states, tools))
    net = NumpyTrm.load(out / "model.safetensors", out / "config.json")
    assert net.wide_buckets == (buckets or BUCKETS)
    space = policy.space
    blocks = [
        scaled_matrix(raw_matrix(space.index, s, t), space._mean, space._scale)
        for s, t in zip(states, tools, strict=True)
    ]
    x, mask = pad(blocks, space.width)
    assert net.wide_reading == policy.model.wide_reading
    rows = zip(states, tools, strict=True)
    terms = [wide_terms(s, t, net.wide_buckets, net.wide_reading) for s, t in rows]
    numpy_scores = net.infer(x, mask, net.wide_logits(terms, mask.shape[1]))
    np.testing.assert_allclose(numpy_scores, torch_scores, atol=1e-4)
    # Without its text part the same network answers otherwise: the part is in those scores.
    assert not np.allclose(net.infer(x, mask), torch_scores, atol=1e-3)
    controller = load_controller(out, "trm")
    decided = controller.decide([DecideRow(s, list(t)) for s, t in zip(states, tools, strict=True)])
    assert [d.action for d in decided] == [
        t[int(np.argmax(s))] for t, s in zip(tools, torch_scores, strict=True)
    ]
    # An exported controller (numpy and the standard library only) answers the same.
    export_controller(out, "trm", tmp_path / "export")
    exported = run_exported(
        tmp_path / "export", [DecideRow(s, list(t)) for s, t in zip(states, tools, strict=True)]
    )
    assert [d.action for d in exported] == [d.action for d in decided]
    np.testing.assert_allclose([d.scores for d in exported], [d.scores for d in decided], atol=1e-5)


def test_the_text_part_reads_stopwords_and_gives_each_candidate_its_own_bias() -> None:
    state = json.dumps({"request": "which of these is not a prime number"})
    old, new = (wide_terms(state, ["a", "b"], 1 << 20, reading) for reading in (1, 2))
    # Reading 2 has every word reading 1 has, the stopwords (`of`, `is`) and one bias more.
    assert all(len(n.ids) > len(o.ids) for o, n in zip(old, new, strict=True))
    assert all(1.0 in n.values and 1.0 not in o.values for o, n in zip(old, new, strict=True))
    assert set(new[0].ids).isdisjoint(new[1].ids)  # each candidate's own weights
    with pytest.raises(ValueError, match="wide_reading 3"):
        wide_terms(state, ["a"], 1 << 20, 3)


def test_the_text_parts_size_is_bounded_naming_the_knob() -> None:
    from pydantic import ValidationError

    from core.schemas.train import TrmTrainerConfig

    assert TrmTrainerConfig.model_validate({"wide_buckets": 1 << 20}).wide_buckets == 1 << 20
    for size in (1 << 23, 16):
        with pytest.raises(ValidationError, match="wide_buckets"):
            TrmTrainerConfig.model_validate({"wide_buckets": size})
