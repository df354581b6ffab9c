"""The trm's linear text part (`wide`, worker/models/trm.py), fitted before the network.

- **Fit**: a conditional logistic regression over each row's candidates (a softmax over their
  linear scores) on the hashed terms of `worker/features/wide.py`, each term's value scaled by
  its inverse document frequency over the train rows (`idf = log((1 + rows) / (1 + df)) + 1`,
  as a TF-IDF), with sklearn's penalty: `C * sum(cross-entropy) + |w|^2 / 2`, `C` the config's
  `wide`. Full-batch L-BFGS. The idf is folded into the saved weights (`w * idf`), so a model
  reads raw terms and carries nothing else.
- **Out of fold**: the network trains on top of the part's scores, so the train rows must see
  scores the part would give a row it never saw (on its own train rows a penalized regression is
  sure of itself where it will not be at the anchors, and the network would learn to trust it
  too much). The train rows are dealt into `FOLDS` folds by world (`env`, rows by index where
  there are too few worlds), each fold scored by a fit on the others. Val and every later row
  are scored by the fit on all train rows.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from worker.features.wide import Terms

FOLDS = 5
MAX_ITER = 200  # L-BFGS iterations per fit
# L-BFGS's remembered steps, each a vector of every bucket: torch's default of 100 held 800 MB at
# a million buckets and made each iteration as slow; 10 is sklearn's default for the same fit.
HISTORY = 10


@dataclass
class Flat:
    """Rows' terms as flat tensors: each term's bucket, value and (row * widest + candidate)."""

    ids: torch.Tensor
    values: torch.Tensor
    slots: torch.Tensor
    mask: torch.Tensor  # (rows, widest)


def flatten(terms: Sequence[list[Terms]]) -> Flat:
    widest = max((len(t) for t in terms), default=1)
    ids: list[int] = []
    values: list[float] = []
    slots: list[int] = []
    mask = torch.zeros(len(terms), widest, dtype=torch.bool)
    for i, row in enumerate(terms):
        mask[i, : len(row)] = True
        for c, t in enumerate(row):
            ids += t.ids
            values += t.values
            slots += [i * widest + c] * len(t.ids)
    return Flat(
        torch.tensor(ids, dtype=torch.long),
        torch.tensor(values, dtype=torch.float32),
        torch.tensor(slots, dtype=torch.long),
        mask,
    )


def logits(weights: torch.Tensor, flat: Flat) -> torch.Tensor:
    out = torch.zeros(flat.mask.numel(), dtype=weights.dtype)
    out.index_add_(0, flat.slots, weights[flat.ids] * flat.values.to(weights.dtype))
    return out.view(flat.mask.shape)


def idf(flat: Flat, buckets: int, rows: int) -> torch.Tensor:
    """Per bucket, log((1 + rows) / (1 + rows whose terms hit it)) + 1."""
    pairs = torch.unique(flat.slots // flat.mask.shape[1] * buckets + flat.ids)
    df = torch.bincount(pairs % buckets, minlength=buckets).to(torch.float64)
    return torch.log((1.0 + rows) / (1.0 + df)) + 1.0


def fit(terms: Sequence[list[Terms]], targets: Sequence[int], c: float, buckets: int) -> np.ndarray:
    """The part's weights (idf folded in), float32 (buckets,)."""
    flat = flatten(terms)
    scale = idf(flat, buckets, len(terms))
    scaled = Flat(flat.ids, (flat.values.double() * scale[flat.ids]).float(), flat.slots, flat.mask)
    target = torch.tensor(list(targets), dtype=torch.long)
    w = torch.zeros(buckets, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [w],
        lr=1.0,
        max_iter=MAX_ITER,
        history_size=HISTORY,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-7,
    )
    penalty = 1.0 / (2.0 * c * max(1, len(terms)))

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        scores = logits(w, scaled).masked_fill(~scaled.mask, -1e9)
        loss = F.cross_entropy(scores, target) + penalty * (w * w).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return (w.detach() * scale).float().numpy()


def folds_of(envs: Sequence[str]) -> list[int]:
    """Each train row's fold: by its world where there are at least FOLDS of them, else by row."""
    if len(set(envs)) >= FOLDS:
        return [zlib.crc32(e.encode()) % FOLDS for e in envs]
    return [i % FOLDS for i in range(len(envs))]


def fit_with_out_of_fold(
    terms: Sequence[list[Terms]],
    targets: Sequence[int],
    envs: Sequence[str],
    c: float,
    buckets: int,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(the weights fitted on every row, each row's out-of-fold logits per candidate)."""
    weights = fit(terms, targets, c, buckets)
    fold = folds_of(envs)
    out: list[np.ndarray] = [np.zeros(len(t), dtype=np.float32) for t in terms]
    for k in range(FOLDS):
        inside = [i for i, f in enumerate(fold) if f != k]
        held = [i for i, f in enumerate(fold) if f == k]
        if not held or not inside:
            continue
        w = fit([terms[i] for i in inside], [targets[i] for i in inside], c, buckets)
        scores = logits(torch.from_numpy(w), flatten([terms[i] for i in held])).numpy()
        for row, i in enumerate(held):
            out[i] = scores[row, : len(terms[i])].astype(np.float32)
    if not math.isfinite(float(np.abs(weights).sum())):
        raise ValueError("the linear text part did not converge")
    return weights, out


def alone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A trm's weights (`state_dict`) answering by its text part alone: the network's score head
    zeroed and the part's gate at 1. The network still runs (its halting head decides how many
    steps), but every candidate gets the same score from it, so the part alone ranks them.

    The trainer offers these weights to its val selection before the first epoch
    (`select_by` loss or auc): a network that never beats its own text part on val worlds is not
    kept. Where the other columns say nothing about unseen worlds (a router's prices and prompt
    lengths on unseen subjects), the network's epochs fit the train worlds' noise on top of
    the part."""
    out = {k: v.clone() for k, v in state.items()}
    out["score.weight"].zero_()
    out["score.bias"].zero_()
    out["wide_gate"].fill_(1.0)
    return out
