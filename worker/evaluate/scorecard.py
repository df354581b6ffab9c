"""Scores with 95% intervals, and the scorecard that holds them (SPEC §7).

A score is a share of examples answered right (or of episodes that failed / recovered). Each one
carries its `n` and a 95% interval, so two scores can be compared honestly:
- a plain proportion (every example counted once, right or wrong): the Wilson interval, which
  stays inside [0, 1] and is sensible at 0.0 and 1.0 (a real 0.0 is a score, never a gap);
- an example averaged over repeats (a share between 0 and 1): the normal interval of the mean
  over examples, so repeating a deterministic model does not narrow its interval;
- a difference (the generalization gap, a bench's delta): the normal interval of the difference,
  paired by example when both sides scored the same examples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

Z95 = 1.959963984540054
FORMAT = "trm-scorecard/1"


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """Normal interval of a mean (sample standard deviation); a single value has no spread."""
    n = len(values)
    if n == 0:
        return (0.0, 1.0)
    mean = sum(values) / n
    if n == 1:
        return (mean, mean)
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(var / n)
    return (mean - half, mean + half)


def score(values: Sequence[float]) -> dict[str, Any]:
    """A score from per-example outcomes (1.0 right, 0.0 wrong, or a share over repeats)."""
    n = len(values)
    value = sum(values) / n if n else None
    if n and all(v in (0.0, 1.0) for v in values):
        low, high = wilson(sum(values), n)
    elif n:
        low, high = mean_interval(values)
        low, high = max(0.0, low), min(1.0, high)
    else:
        low, high = 0.0, 1.0
    return {"value": _round(value), "n": n, "ci95": [_round(low), _round(high)]}


def difference(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`a − b` for two independent scores (the generalization gap: train − anchor)."""
    if a["value"] is None or b["value"] is None:
        return {"value": None, "ci95": None}
    va, vb = a["value"], b["value"]
    se = math.sqrt(_var(va, a["n"]) + _var(vb, b["n"]))
    d = va - vb
    return {"value": _round(d), "ci95": [_round(d - Z95 * se), _round(d + Z95 * se)]}


def paired_delta(router: Sequence[float], baseline: Sequence[float]) -> dict[str, Any]:
    """Router − baseline on the same examples: the mean per-example difference and its interval."""
    if len(router) != len(baseline):
        raise ValueError("a paired delta needs the same examples on both sides")
    diffs = [r - b for r, b in zip(router, baseline, strict=True)]
    if not diffs:
        return {"value": None, "n": 0, "ci95": None}
    low, high = mean_interval(diffs)
    value = sum(diffs) / len(diffs)
    return {"value": _round(value), "n": len(diffs), "ci95": [_round(low), _round(high)]}


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    (al, ah), (bl, bh) = a["ci95"], b["ci95"]
    return not (ah < bl or bh < al)


def grouped(
    outcomes: Iterable[tuple[str, float]],
) -> dict[str, dict[str, Any]]:
    """{group: score} from (group, outcome) pairs (per family, per world)."""
    groups: dict[str, list[float]] = {}
    for key, value in outcomes:
        groups.setdefault(key, []).append(value)
    return {key: score(values) for key, values in sorted(groups.items())}


def _var(p: float, n: int) -> float:
    return p * (1 - p) / n if n else 0.25


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def headline(card: dict[str, Any]) -> dict[str, float | None]:
    """The plain numbers of a scorecard (what the ledger and the card show)."""
    keys = ("train_score", "anchor_score", "failure_rate", "recovery_rate", "generalization_gap")
    return {k: card.get(k) for k in keys}
