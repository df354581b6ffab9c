"""A row as the matrix a model reads (SPEC §6): the named numbers of `worker/features/` placed in a
feature space's columns (`FeatureSpace.raw`), and scaled for the neural model
(`FeatureSpace.scaled`).

Only numpy and `worker/features/` (stdlib): an exported controller ships this file and that
package as they are (`worker/decide/export.py`), so the export encodes a row with this very code.
"""

from __future__ import annotations

import numpy as np

from worker.features.row import row_features


def raw_matrix(index: dict[str, int], state: str, tools: list[str]) -> np.ndarray:
    """(candidates, features): the values, NaN where a candidate has no such feature (what a
    tree model reads). `index`: each kept feature name's column."""
    out = np.full((len(tools), len(index)), np.nan, dtype=np.float64)
    for c, features in enumerate(row_features(state, tools)):
        for name, value in features.items():
            j = index.get(name)
            if j is not None:
                out[c, j] = value
    return out


def scaled_matrix(raw: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(candidates, 2 * features), float32: the signed-log values less the train mean over the
    train spread (0 where missing), then a presence flag for each (what the neural model reads)."""
    present = ~np.isnan(raw)
    values = np.where(present, squash(np.nan_to_num(raw)), 0.0)
    values = np.where(present, (values - mean) / scale, 0.0)
    return np.concatenate([values, present], axis=1).astype(np.float32)


def squash(values: np.ndarray) -> np.ndarray:
    """The signed log: numbers keep their order and sign, large ones are tamed."""
    return np.sign(values) * np.log1p(np.abs(values))
