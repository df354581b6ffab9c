"""A bench on a published data set, run by the service: a menu entry with `external`
(specs/benches/routellm.json) names the data set's bench in worker/external/, which scores the
router (and a trained baseline) beside its own baselines with its own metric. The figures become
the run's scorecard.json.

The scorecard keeps the shape of every bench's, so the card, the runs list and the dashboard read
it as they read any: `router` and `baseline` sides, each with `anchor_score` (the data set's
metric on its first anchor set: routellm's APGR on MMLU subjects never trained on) and its 95%
interval under `scores`, and `per_family` holding every anchor set. It adds what the data set
reports:
    "external": "routellm", "metric": "apgr",
    "methods": [{"dataset", "anchors", "method", "metric", "value", "ci95", "n", "seeds",
                 "extra": {"cpt50": ...}, "curve": [[share of strong calls, quality], ...]}, ...]
one record per (anchor set, method): the baselines, `router` and, when trained, `baseline`.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from core.card import show_best
from core.rundir import SCORECARD, write_json_atomic
from worker.context import StageContext, StageFailure
from worker.evaluate import scorecard as sc
from worker.evaluate.policies import load_policy
from worker.external import BENCHES, BenchRow
from worker.external.common import Scored

log = logging.getLogger("trm.worker")

# What each data set's headline figure is, said once on the scorecard.
METRIC_NOTES = {
    "apgr": "anchor score is RouteLLM's APGR: the area under the performance gap recovered over "
    "the share of strong calls (random routing 0.5, the oracle's is the most any router reaches)",
    "quality": "anchor score is the share of prompts answered right by the one model called",
}


def _score(row: BenchRow) -> dict[str, Any]:
    return {"value": round(row.value, 4), "ci95": [round(v, 4) for v in row.ci95], "n": row.n}


def _side(ref: str, model: str, rows: list[BenchRow]) -> dict[str, Any]:
    """One side of the scorecard from its figures, one per anchor set (the first is headline)."""
    first = rows[0]
    return {
        "ref": ref,
        "model": model,
        "metric": first.metric,
        "anchor_score": round(first.value, 4),
        "train_score": None,
        "generalization_gap": None,
        "scores": {"anchor_score": _score(first)},
        "per_family": {row.anchors: {"anchor_score": _score(row)} for row in rows},
        "n": {"anchor": first.n},
    }


def _record(row: BenchRow) -> dict[str, Any]:
    out = dataclasses.asdict(row)
    out["ci95"] = [round(v, 4) for v in row.ci95]
    out["curve"] = [list(point) for point in row.curve]
    return out


def evaluate_external(ctx: StageContext, resolved: dict[str, Any]) -> dict[str, Any]:
    """Score the resolved sides on the data set (see the module docstring); the stage's result."""
    name = resolved["external"]
    # A data set's bench scores trained models when it has `score` (routellm so far).
    score = getattr(BENCHES.get(name), "score", None)
    if score is None:
        raise StageFailure("bad_input", f"bench {resolved['bench']}: {name} cannot score a router")
    models = []
    for side in ("router", "baseline"):
        info = resolved[side]
        if "policy" in info:
            models.append(Scored(side, load_policy(info["policy"]), info.get("knobs") or {}))
    seeds = [resolved["seed"] + r for r in range(resolved["repeats"])]
    try:
        rows: list[BenchRow] = score(ctx.stage_dir, Path(resolved["data"]), models, seeds, log.info)
    except (FileNotFoundError, ValueError) as exc:
        raise StageFailure("dependency", f"bench {resolved['bench']}: {exc}") from None
    card = scorecard(ctx.run_id, resolved, rows)
    router, baseline = card["router"], card["baseline"]
    routed = [row for row in rows if row.method == "router"]
    write_json_atomic(ctx.run_dir / SCORECARD, card)
    ctx.outputs.append(ctx.run_dir / SCORECARD)
    scored = sum(row.n for row in routed)
    ctx.counters["examples_scored"] = scored * len(models)
    show_best(ctx.card, router)
    ctx.progress(scored, scored, unit="rows", current_anchor=router["anchor_score"])
    ctx.note(
        f"{name} {router['metric']} on {', '.join(r.anchors for r in routed)}: router "
        + ", ".join(f"{r.value:.3f}" for r in routed)
        + f"; {baseline['ref']} "
        + ", ".join(f"{r['anchor_score']['value']:.3f}" for r in baseline["per_family"].values())
    )
    return {
        "router_anchor": router["anchor_score"],
        "router_ci95": router["scores"]["anchor_score"]["ci95"],
        "baseline_anchor": baseline["anchor_score"],
        "delta": card["delta"]["anchor_score"]["value"],
    }


def scorecard(run_id: str, resolved: dict[str, Any], rows: list[BenchRow]) -> dict[str, Any]:
    """The scorecard of a resolved external bench from its figures (see the module docstring):
    `router` is the rows of method `router`; `baseline` those of the resolved baseline."""
    by_method: dict[str, list[BenchRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    router = _side(resolved["router"]["ref"], resolved["router"]["policy"]["type"],
                   by_method["router"])  # fmt: skip
    base_info = resolved["baseline"]
    if "policy" in base_info:
        baseline = _side(base_info["ref"], base_info["policy"]["type"], by_method["baseline"])
    else:
        baseline = _side(base_info["ref"], "baseline", by_method[base_info["baseline"]])
    same_metric = router["metric"] == baseline["metric"]
    delta = {
        "anchor_score": {
            "value": round(router["anchor_score"] - baseline["anchor_score"], 4)
            if same_metric
            else None,
            "ci95": None,
        }
    }
    notes = [METRIC_NOTES[m] for m in dict.fromkeys((router["metric"], baseline["metric"]))
             if m in METRIC_NOTES]  # fmt: skip
    return {
        "format": sc.FORMAT,
        "run_id": run_id,
        "bench": resolved["bench"],
        "external": resolved["external"],
        "metric": router["metric"],
        "data": resolved["data"],
        "repeats": resolved["repeats"],
        **sc.headline(router),
        "baseline_anchor_score": baseline["anchor_score"],
        "delta": delta,
        "router": router,
        "baseline": baseline,
        "methods": [_record(row) for row in rows],
        "notes": notes,
    }
