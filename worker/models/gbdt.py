"""The gradient-boosted reference ranker (SPEC §6 `gbdt`): LightGBM over the generic (state,
candidate) features of `worker/features/`, one score per candidate.

Files (in `trainer/`, or wherever a bench points): `model.txt` (LightGBM's own text format: a
model file is data, never code, so loading one cannot run anything) and `features.json`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.rundir import FEATURES, GBDT_MODEL, atomic_file
from worker.models.feature_space import FeatureSpace
from worker.models.policy import Policy, files_hash, model_files


def matrix(space: FeatureSpace, rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, list[int]]:
    """All candidates of `rows` stacked (NaN where a feature is absent), and each row's count."""
    space.prefetch((r["state"], list(r["tools"])) for r in rows)
    blocks = [space.raw(r["state"], list(r["tools"])) for r in rows]
    if not blocks:
        return np.zeros((0, len(space.names))), []
    return np.concatenate(blocks), [len(b) for b in blocks]


class GbdtPolicy(Policy):
    def __init__(self, booster: Any, space: FeatureSpace, name: str, model_hash: str) -> None:
        super().__init__()
        self.booster, self.space = booster, space
        self.name, self.model_hash = name, model_hash

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        rows = [{"state": s, "tools": list(t)} for s, t in zip(states, tools, strict=True)]
        x, counts = matrix(self.space, rows)
        if not counts:
            return []
        self.forward_passes += 1
        flat = self.booster.predict(x, num_threads=1) if len(x) else np.zeros(0)
        out, start = [], 0
        for n in counts:
            out.append([float(v) for v in flat[start : start + n]])
            start += n
        return out


def save(folder: Path, booster: Any, space: FeatureSpace) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    model, features = folder / GBDT_MODEL, folder / FEATURES
    with atomic_file(model) as fh:
        fh.write(booster.model_to_string())
    space.save(features)
    return [model, features]


def load(folder: Path) -> GbdtPolicy:
    from worker.models.lgbm import lightgbm

    files = model_files(folder, [GBDT_MODEL, FEATURES], "gbdt")
    booster = lightgbm.Booster(model_str=files[0].read_text())
    space = FeatureSpace.load(files[1])
    return GbdtPolicy(booster, space, f"gbdt:{folder}", files_hash(*files))
