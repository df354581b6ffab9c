"""The trm's dropout acts while training only: a model trained with it has the weights the
exported numpy forward reads, and reloads to score as trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.train.test_trm import write_choice_corpus
from worker.decide.numpy_trm import WEIGHT_KEYS
from worker.models.feature_space import FeatureSpace
from worker.models.trm import build, load_trm
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train

SMALL = {"hidden": 16, "n_recursions": 1, "cycles": 1, "supervision_steps": 1, "batch_size": 8}


def test_a_model_trained_with_dropout_reloads_with_the_exported_weights_and_its_scores(
    tmp_path: Path,
) -> None:
    corpus = write_choice_corpus(tmp_path / "corpus", rows=120)
    config = {**SMALL, "dropout": 0.3, "epochs": 20, "patience": 20}
    result = train(config, corpus, tmp_path / "trm", TrainerCallbacks(), seed=0)
    weights = set(load_trm(tmp_path / "trm").model.state_dict())
    assert weights == set(WEIGHT_KEYS)
    val = [json.loads(line) for line in (corpus / "val.jsonl").read_text().splitlines()]
    policy = load_trm(tmp_path / "trm")
    picks = [policy.act(r["state"], r["tools"]) for r in val]
    reloaded = sum(p == r["action"] for p, r in zip(picks, val, strict=True)) / len(val)
    assert reloaded == pytest.approx(result["eval"]["val_accuracy"], abs=1e-4)
    assert reloaded > 0.8  # the state names the right tool: learned through the dropout


def test_dropout_changes_training_passes_and_never_an_answer() -> None:
    torch.manual_seed(0)
    space = FeatureSpace(["a", "b"], [0.0, 0.0], [1.0, 1.0])
    model = build(space, {"hidden": 8, "n_recursions": 1, "cycles": 1, "dropout": 0.5})
    x, mask = torch.randn(4, 3, space.width), torch.ones(4, 3, dtype=torch.bool)
    model.train()
    assert not torch.equal(model.infer(x, mask, 1), model.infer(x, mask, 1))
    model.eval()
    assert torch.equal(model.infer(x, mask, 1), model.infer(x, mask, 1))
