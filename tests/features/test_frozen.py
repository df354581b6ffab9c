"""The encoder gives every frozen row (tests/features/frozen.py: each generated family at each
state compression, and routerBench) the same features it gave when the sample was written: the
same names, in the same order, with the same values bit for bit. A speed-up of worker/features
or of the feature space must keep this test passing untouched."""

from __future__ import annotations

from collections import Counter

import numpy as np

from tests.features import frozen
from worker.models.feature_space import FeatureSpace


def test_every_frozen_row_encodes_to_the_same_features_in_the_same_order() -> None:
    rows = frozen.load()
    assert Counter(r["source"].split("/")[0] for r in rows).keys() == {
        *frozen.FAMILIES,
        "routerbench",
    }
    for i, row in enumerate(rows):
        got = frozen.encode(row["state"], row["tools"])
        assert got == row["features"], f"row {i} ({row['source']}) encodes differently"


def test_the_feature_space_places_the_frozen_features_in_their_columns() -> None:
    # The matrices a model reads, built from the frozen names and values by hand, against
    # FeatureSpace.raw and .scaled (the column arrays and the scaling, however they are computed).
    rows = frozen.load()
    names = sorted({f[0] for r in rows for c in r["features"] for f in c})
    space = FeatureSpace(
        names,
        [0.5 * (i % 7) for i in range(len(names))],
        [1.0 + (i % 5) for i in range(len(names))],
    )
    column = {n: j for j, n in enumerate(names)}
    for row in rows:
        want = np.full((len(row["tools"]), len(names)), np.nan)
        for c, features in enumerate(row["features"]):
            for name, value, _ in features:
                want[c, column[name]] = _number(value)
        got = space.raw(row["state"], row["tools"])
        np.testing.assert_array_equal(got, want)
        present = ~np.isnan(want)
        squashed = np.sign(np.nan_to_num(want)) * np.log1p(np.abs(np.nan_to_num(want)))
        values = np.where(present, (squashed - space.mean) / np.asarray(space.scale), 0.0)
        number = np.nan_to_num(want)  # each value's sign, as two flags, where present
        above, below = present & (number > 0), present & (number < 0)
        scaled = np.concatenate([values, present, above, below], axis=1).astype(np.float32)
        np.testing.assert_array_equal(space.scaled(row["state"], row["tools"]), scaled)


def _number(text: str) -> float:
    """A value's repr (a float, an int or a bool) as the float a matrix holds."""
    bools = {"True": 1.0, "False": 0.0}
    return bools[text] if text in bools else float(text)
