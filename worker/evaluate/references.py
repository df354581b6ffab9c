"""What a user would pick instead, on the same rows (SPEC §7): every scorecard stands the router
next to `majority` (the most frequent action id of the train split) and the `gbdt` reference (a
LightGBM ranker over the same generic features, trained on the same train split, early-stopped on
the same val split), both scored on the same anchors.

For each reference: its anchor score with its interval, the paired difference router − reference
over the same examples, and McNemar's exact test on the examples exactly one of them got right.
A router that loses to a reference is not done, whatever its delta over an untrained net.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from worker.evaluate import scorecard as sc
from worker.evaluate.policies import ConstantPolicy
from worker.models.policy import Policy, argmax

REFERENCES = ("majority", "gbdt")


def majority(train: list[dict[str, Any]]) -> Policy:
    action = Counter(r["action"] for r in train).most_common(1)[0][0] if train else None
    policy = ConstantPolicy(action)
    policy.name = f"majority:{action}"
    return policy


def gbdt(train: list[dict[str, Any]], val: list[dict[str, Any]], seed: int) -> Policy:
    from worker.models.gbdt import GbdtPolicy
    from worker.train.gbdt import fit

    booster, space, info = fit(train, val, {}, seed)
    return GbdtPolicy(booster, space, f"gbdt(rounds={info['rounds']})", "")


def mcnemar(router: list[float], reference: list[float]) -> dict[str, Any]:
    """Exact two-sided McNemar test: of the examples exactly one side got right, how many each."""
    only_router = sum(1 for a, b in zip(router, reference, strict=True) if a > b)
    only_reference = sum(1 for a, b in zip(router, reference, strict=True) if b > a)
    n, k = only_router + only_reference, min(only_router, only_reference)
    p = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)
    return {"router_only": only_router, "reference_only": only_reference, "p_value": round(p, 6)}


def correct(policy: Policy, rows: list[dict[str, Any]]) -> list[float]:
    if not rows:
        return []
    scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
    return [float(r["tools"][argmax(s)] == r["action"]) for r, s in zip(rows, scores, strict=True)]


def compare(
    router: list[float], policies: dict[str, Policy], anchors: list[dict[str, Any]]
) -> dict[str, Any]:
    """{name: {model, anchor_score, delta (router − it, paired), mcnemar}} on the same anchors;
    `router` holds the router's per-example outcomes on `anchors`, in order."""
    out: dict[str, Any] = {}
    for name, policy in policies.items():
        theirs = correct(policy, anchors)
        out[name] = {
            "model": policy.name,
            "anchor_score": sc.score(theirs),
            "delta": sc.paired_delta(router, theirs),
            "mcnemar": mcnemar(router, theirs),
        }
    return out


def references(
    router: list[float],
    anchors: list[dict[str, Any]],
    train: list[dict[str, Any]],
    val: list[dict[str, Any]],
    seed: int,
) -> dict[str, Any]:
    """Both references trained on `train` (and `val` for the gbdt's early stopping), compared with
    the router's outcomes on `anchors`."""
    policies = {"majority": majority(train)}
    if train:
        policies["gbdt"] = gbdt(train, val, seed)
    return compare(router, policies, anchors)


def summary(refs: dict[str, Any]) -> str:
    """One line for notes and logs: `router - majority +0.31 [...]; router - gbdt -0.02 [...]`."""
    parts = []
    for name, ref in refs.items():
        delta = ref["delta"]
        if delta["value"] is None:
            continue
        low, high = delta["ci95"]
        parts.append(f"router - {name} {delta['value']:+.3f} [{low:+.3f}, {high:+.3f}]")
    return "; ".join(parts)
