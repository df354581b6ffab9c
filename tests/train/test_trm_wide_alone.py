"""With a linear text part, the trm's val selection (by loss or auc) starts from the part alone:
a network that never beats its own text part on the val worlds is not kept, and the model then
answers exactly as the part does."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.features.test_text_wide import TINY, WORLDS, corpus, prompt_row, write
from worker.decide.numpy_trm import NumpyTrm
from worker.features.wide import wide_terms
from worker.models.trm import load_trm
from worker.train import trm
from worker.train.callbacks import TrainerCallbacks


def leaky_row(rng: random.Random, world: int, leak: bool) -> dict[str, Any]:
    """A prompt row whose label is its words' four times in five, with a `score` field that
    gives the label away in `leak` rows (the train rows) and is a coin toss elsewhere: the
    network, which reads the field, fits it; the text part, which reads words only, cannot."""
    row = prompt_row(rng, world)
    if rng.random() < 0.2:
        row["action"] = {"a": "b", "b": "a"}[row["action"]]
    state = json.loads(row["state"])
    told = row["action"] == "b" if leak else rng.random() < 0.5
    state["score"] = round(float(told) + rng.random() * 0.1, 3)
    row["state"] = json.dumps(state)
    return row


def leaky_corpus(root: Path) -> tuple[Path, list[dict[str, Any]]]:
    rng = random.Random(0)
    write(root, "train", [leaky_row(rng, w % WORLDS, True) for w in range(320)])
    write(root, "val", [leaky_row(rng, w % WORLDS, False) for w in range(60)])
    return root, [leaky_row(rng, w % WORLDS, False) for w in range(120)]


def part_alone_scores(folder: Path, states: list[str], tools: list[list[str]]) -> np.ndarray:
    """The saved text part's logits, read by the numpy forward's own reading of the terms."""
    net = NumpyTrm.load(folder / "model.safetensors", folder / "config.json")
    rows = zip(states, tools, strict=True)
    terms = [wide_terms(s, t, net.wide_buckets, net.wide_reading) for s, t in rows]
    return net.wide_logits(terms, max(len(t) for t in tools))


@pytest.mark.parametrize("select_by", ["loss", "auc"])
def test_a_network_that_cannot_beat_its_text_part_on_val_is_not_kept(
    tmp_path: Path, select_by: str
) -> None:
    folder, held_out = leaky_corpus(tmp_path / "c")
    callbacks = TrainerCallbacks()
    config = {**TINY, "wide": 10.0, "epochs": 4, "select_by": select_by}
    result = trm.train(config, folder, tmp_path / "m", callbacks, seed=0)
    first = callbacks.evals[0]
    assert first["epoch"] == -1  # the part alone, offered before the first epoch
    # Every epoch of the network, fitted to the leak, is worse on val than the part alone.
    assert all(e["val_loss"] > first["val_loss"] for e in callbacks.evals[1:])
    assert all(e["val_accuracy"] < first["val_accuracy"] for e in callbacks.evals[1:])
    assert result["best_epoch"] == -1
    assert result["eval"]["val_accuracy"] == pytest.approx(first["val_accuracy"], abs=1e-4)
    policy = load_trm(tmp_path / "m", "cpu")
    states, tools = [r["state"] for r in held_out], [r["tools"] for r in held_out]
    kept = np.array(policy.scores_batch(states, tools))
    alone = part_alone_scores(tmp_path / "m", states, tools)
    # The same ranking as the part alone, as log-probabilities.
    np.testing.assert_allclose(
        kept - kept.max(-1, keepdims=True), alone - alone.max(-1, keepdims=True), atol=1e-4
    )


def test_a_network_that_beats_its_text_part_on_val_is_kept(tmp_path: Path) -> None:
    folder, _ = corpus(tmp_path)
    callbacks = TrainerCallbacks()
    config = {**TINY, "wide": 10.0, "epochs": 6, "select_by": "loss"}
    result = trm.train(config, folder, tmp_path / "m", callbacks, seed=0)
    losses = [e["val_loss"] for e in callbacks.evals]
    assert callbacks.evals[0]["epoch"] == -1
    least = min(range(len(losses)), key=losses.__getitem__)
    assert least > 0 and result["best_epoch"] == callbacks.evals[least]["epoch"] >= 0


def test_without_a_text_part_or_selecting_by_accuracy_nothing_comes_before_the_first_epoch(
    tmp_path: Path,
) -> None:
    folder, _ = corpus(tmp_path)
    plain, by_accuracy = (
        {**TINY, "epochs": 2, "select_by": "loss"},
        {**TINY, "wide": 10.0, "epochs": 2},
    )
    for name, config in (("plain", plain), ("by-accuracy", by_accuracy)):
        callbacks = TrainerCallbacks()
        trm.train(config, folder, tmp_path / name, callbacks, seed=0)
        assert [e["epoch"] for e in callbacks.evals] == [0, 1]
