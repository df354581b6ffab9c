"""The columns the trm reads: a screen by a quick gradient-boosted ranker (the trm's `screen`).

A fitted feature space holds every reading of the train rows that enough worlds share: often
thousands of columns (a verify corpus, 2,588). A tree ranker takes one column at a time and
splits where it separates the labels, so from a world's hundred-odd rows it finds the few
columns that decide (a plan's largest overrun of a latency budget, its cost over the budget)
and ignores the rest. The network reads all of them at once, and with 122 rows of a family and
1,444 columns it memorized the one train world (train 1.00, an unseen world of that family
0.47) where a LightGBM ranker on the same rows read the unseen world at 0.89.

So before the network is built, a LightGBM ranker is fitted on the train rows over the trm's
own space (early-stopped on val, one thread, the run's seed), and the network reads the
`screen` columns of most gain (total split gain over the ranker's trees; fewer where fewer have
any), in the space's order. The ranker is discarded: the model's files hold only the kept columns
(`features.json`), so deciding, exporting and the decision-time encoder need no LightGBM.
With no column of any gain (rows that one feature cannot split), or fewer than `MIN_ROWS` train
rows, the space is kept whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.schemas.train import GbdtTrainerConfig
from worker.models.feature_space import FeatureSpace
from worker.models.gbdt import matrix
from worker.train.gbdt import TOP_FEATURES, features_by_gain, labels, ranker_params

# The ranker: the gbdt reference's own defaults (core/schemas/train.py GbdtTrainerConfig).
RANKER = GbdtTrainerConfig()
# Train rows below which the space is read whole: a ranker's gains over a few dozen rows are
# mostly noise (19 route rows: the screened trm read the anchors at 0.25, its untrained self's
# figure, where every column gave 0.375).
MIN_ROWS = 100


def with_phantoms(
    space: FeatureSpace, rows: list[dict[str, Any]]
) -> tuple[np.ndarray, list[int], np.ndarray]:
    """The ranker's matrix, groups and labels, each row with one more candidate that has no
    feature and is never the answer. On a two-way choice the ranker cannot split a number of the
    state (the same on both candidates): for a pairwise objective the two candidates' gradients
    cancel wherever both are, and LightGBM gave such a column no split in any tree, under the
    split by candidate too (a budget's overrun deciding `accept` or `reject`: gain 0 over 20
    trees, a column of noise 609). A third candidate that is always wrong breaks the tie (the
    overrun's gain 413)."""
    x, groups = matrix(space, rows)
    y = labels(rows)
    at = np.cumsum(groups)
    blank = np.full((len(groups), x.shape[1]), np.nan)
    return np.insert(x, at, blank, axis=0), [g + 1 for g in groups], np.insert(y, at, 0)


def screen_gains(
    space: FeatureSpace, rows: list[dict[str, Any]], val: list[dict[str, Any]], seed: int
) -> np.ndarray:
    """Each column's total split gain in a LightGBM ranker fitted on `rows` (early-stopped on
    `val` when there is one): what the screen ranks by."""
    from worker.models.lgbm import lightgbm

    x, groups, y = with_phantoms(space, rows)
    params = ranker_params(RANKER.model_dump(), seed)
    train_set = lightgbm.Dataset(x, y, group=groups, free_raw_data=True)
    valid: list[Any] = []
    hooks: list[Any] = []
    if val:
        xv, gv, yv = with_phantoms(space, val)
        valid = [lightgbm.Dataset(xv, yv, group=gv, reference=train_set)]
        hooks.append(lightgbm.early_stopping(RANKER.early_stopping_rounds, verbose=False))
    booster = lightgbm.train(
        params, train_set, num_boost_round=RANKER.n_estimators, valid_sets=valid, callbacks=hooks
    )
    best = booster.best_iteration or None
    return np.asarray(booster.feature_importance("gain", iteration=best), dtype=np.float64)


@dataclass(frozen=True)
class Screened:
    """What the screen kept: the space the network reads, how many columns the fitted space had,
    and the kept columns of most gain with their meaning (the trainer result's `top_features`,
    as the gbdt lists its own)."""

    space: FeatureSpace
    fitted: int
    top: list[dict[str, Any]] = field(default_factory=list)


def screened(
    space: FeatureSpace,
    rows: list[dict[str, Any]],
    val: list[dict[str, Any]],
    keep: int,
    seed: int,
) -> Screened:
    """`space` cut to its `keep` columns of most screen gain (ties: the space's order); the
    whole space when it has no more columns than that, when there are fewer than MIN_ROWS train
    rows to judge them by, or when no column has any gain."""
    whole = Screened(space, len(space.names))
    if keep <= 0 or len(space.names) <= keep or len(rows) < MIN_ROWS:
        return whole
    gains = screen_gains(space, rows, val, seed)
    ranked = sorted((i for i in range(len(gains)) if gains[i] > 0), key=lambda i: (-gains[i], i))
    if not ranked:
        return whole
    kept = sorted(ranked[:keep])
    top = features_by_gain(gains, space.names, min(keep, TOP_FEATURES))
    return Screened(space.subset(kept), len(space.names), top)
