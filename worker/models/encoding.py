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
    tree model reads). `index`: each kept feature name's column. Each candidate's kept values
    are placed with one assignment (one by one, they cost a fifth of the encoding)."""
    out = np.full((len(tools), len(index)), np.nan, dtype=np.float64)
    get = index.get
    for c, features in enumerate(row_features(state, tools)):
        columns, values = [], []
        for name, value in features.items():
            j = get(name)
            if j is not None:
                columns.append(j)
                values.append(value)
        out[c, columns] = values
    return out


# What the neural model reads of each feature, a block of columns each: the scaled value,
# whether the feature is there, whether its value is above 0 and whether below. Differences,
# gaps and overruns (a plan's cost over its budget) decide at their sign, and the flags give
# that step to the network as it is, where from a world's hundred-odd rows it learned a blurred
# threshold: a verify row 0.785 -> 0.951, another 0.575 -> 0.877 (docs/quality.md).
BLOCKS = 4


def scaled_matrix(raw: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(candidates, BLOCKS * features), float32: the signed-log values less the train mean over
    the train spread (0 where missing), then for each feature a presence flag, then whether its
    value is above 0, then whether below (what the neural model reads). Only the present values
    are computed: a candidate has a few hundred of the space's thousands."""
    present = ~np.isnan(raw)
    rows, columns = np.nonzero(present)
    width = raw.shape[1]
    out = np.zeros((raw.shape[0], BLOCKS * width), dtype=np.float32)
    values = raw[rows, columns]
    out[rows, columns] = (squash(values) - mean[columns]) / scale[columns]
    out[:, width : 2 * width] = present
    out[rows, 2 * width + columns] = values > 0
    out[rows, 3 * width + columns] = values < 0
    return out


def squash(values: np.ndarray) -> np.ndarray:
    """The signed log: numbers keep their order and sign, large ones are tamed."""
    return np.sign(values) * np.log1p(np.abs(values))
