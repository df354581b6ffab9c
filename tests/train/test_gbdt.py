"""The `gbdt` reference trainer: a LightGBM ranker on the generic features, saved as LightGBM's
own text (never a pickle), reloaded to the same scores, stopped by a cancel at the next round."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from worker.context import StageFailure
from worker.evaluate.policies import load_policy
from worker.models.gbdt import GbdtPolicy
from worker.models.policy import argmax
from worker.train.callbacks import TrainerCallbacks
from worker.train.gbdt import train


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def accuracy(policy: Any, rows: list[dict[str, Any]]) -> float:
    scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    right = [r["tools"][argmax(s)] == r["action"] for r, s in zip(rows, scores, strict=True)]
    return sum(right) / len(rows)


def test_gbdt_learns_route_and_reloads_from_its_text_model(route_corpus: Path, tmp_path: Path):
    callbacks = TrainerCallbacks()
    result = train({}, route_corpus, tmp_path, callbacks, seed=0)
    assert {Path(p).name for p in result["artifacts"]} == {"model.txt", "features.json"}
    assert (tmp_path / "model.txt").read_text().startswith("tree")  # LightGBM's text format
    assert callbacks.steps and result["steps"] >= 1 and result["stopped_by"] is None
    policy = load_policy({"type": "gbdt", "path": str(tmp_path)})
    assert isinstance(policy, GbdtPolicy)
    val = read(route_corpus / "val.jsonl")
    majority = Counter(r["action"] for r in val).most_common(1)[0][1] / len(val)
    assert accuracy(policy, val) >= majority + 0.3
    again = train({}, route_corpus, tmp_path / "again", TrainerCallbacks(), seed=0)
    same = load_policy({"type": "gbdt", "path": str(tmp_path / "again")})
    assert again["steps"] == result["steps"]  # deterministic in the seed
    assert same.scores(val[0]["state"], val[0]["tools"]) == pytest.approx(
        policy.scores(val[0]["state"], val[0]["tools"])
    )


def test_a_cancel_stops_boosting_at_the_next_round(route_corpus: Path, tmp_path: Path) -> None:
    class CancelAfterFirstReport(TrainerCallbacks):
        def should_stop(self) -> str | None:
            return "cancel" if self.steps else None

    result = train(
        {"early_stopping_rounds": 500}, route_corpus, tmp_path, CancelAfterFirstReport(), seed=0
    )
    assert result["stopped_by"] == "cancel" and result["steps"] <= 11
    assert (tmp_path / "model.txt").exists()  # what was built is kept


def test_a_bad_gbdt_setting_names_the_field(route_corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(StageFailure) as caught:
        train({"num_leaves": 1}, route_corpus, tmp_path, TrainerCallbacks(), seed=0)
    assert caught.value.failure_class == "bad_input" and "gbdt.num_leaves" in caught.value.reason
