"""A bench on a published data set, run by the service: a menu entry with `external`
(specs/benches/routellm.json, bfcl.json, jobshop.json) names the data set's bench in
worker/external/, whose `score` scores the router (and a trained baseline) beside its own
baselines with its own metric. The figures become the run's scorecard.json.

The scorecard keeps the shape of every bench's, so the card, the runs list and the dashboard read
it as they read any: `router` and `baseline` sides, each with `anchor_score` (the data set's
metric on its first anchor set: routellm's APGR on MMLU subjects never trained on, bfcl's
accuracy on `multiple`, jobshop's mean gap on Taillard 15x15) and its 95% interval under
`scores`, and `per_family` holding every anchor set (each with its own `metric`). It adds what
the data set reports:
    "external": "routellm", "metric": "apgr", "higher_is_better": true,
    "methods": [{"dataset", "anchors", "method", "metric", "value", "ci95", "n", "seeds",
                 "higher_is_better", "extra": {"cpt50": ...},
                 "curve": [[share of strong calls, quality], ...]}, ...],
    "best": {"<anchor set> <metric>": {"method", "value"}, ...}
one record per (anchor set, method): the baselines, `router` and, when trained, `baseline`.
`delta` is router minus baseline as every bench's; with a metric where lower is better (jobshop's
gap) a negative delta is the router ahead: `delta.anchor_score.better` says which side is, and
`best` picks the least where lower is better.

Work: jobshop's knob `instances` (the first N of each anchor set) comes from the bench spec, and
its trained models' rollouts are refused before they would run past the run's budget or
TRM_MAX_SECONDS.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from core.card import show_best
from core.rundir import CORPUS, SCORECARD, write_json_atomic
from worker.context import StageContext, StageFailure
from worker.evaluate import scorecard as sc
from worker.evaluate.policies import load_policy
from worker.external import BENCHES, BenchRow
from worker.external.common import Scored, ScoreRefused

log = logging.getLogger("trm.worker")

# What each data set's headline figure is, said once on the scorecard.
METRIC_NOTES = {
    "apgr": "anchor score is RouteLLM's APGR: the area under the performance gap recovered over "
    "the share of strong calls (random routing 0.5, the oracle's is the most any router reaches)",
    "quality": "anchor score is the share of prompts answered right by the one model called",
    "accuracy": "anchor score is BFCL's accuracy of the function chosen on `multiple` questions "
    "whose function sets were never trained on (no_call counts as wrong); `live_multiple` beside "
    "it, and abstain recall on the irrelevance questions (no_call is right there)",
    "abstain_recall": "abstain recall: the share of irrelevance questions answered with no call",
    "false_abstain": "false abstain: the share of questions with a right function answered with "
    "no call (lower is better)",
    "mean_gap": "anchor score is the mean makespan gap to the best known makespan (optimum or "
    "upper bound) over the Taillard instances, by rollout: lower is better (0 is optimal), so a "
    "negative delta is the router ahead",
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
        "higher_is_better": first.higher_is_better,
        "anchor_score": round(first.value, 4),
        "train_score": None,
        "generalization_gap": None,
        "scores": {"anchor_score": _score(first)},
        "per_family": {
            row.anchors: {"anchor_score": _score(row), "metric": row.metric} for row in rows
        },
        "n": {"anchor": first.n},
    }


def _best(rows: list[BenchRow]) -> dict[str, dict[str, Any]]:
    """The best method of each anchor set and metric, the least where lower is better."""
    groups: dict[str, list[BenchRow]] = {}
    for row in rows:
        groups.setdefault(f"{row.anchors} {row.metric}", []).append(row)
    out = {}
    for key, group in groups.items():
        sign = 1 if group[0].higher_is_better else -1
        top = max(group, key=lambda r: sign * r.value)
        out[key] = {"method": top.method, "value": round(top.value, 4)}
    return out


def _bench(name: str, resolved: dict[str, Any], deadline: float | None, limit: float) -> Any:
    """The data set's bench with the spec's work knobs: jobshop's `instances`, and the seconds
    left to its rollouts (the run's budget, else TRM_MAX_SECONDS)."""
    bench = BENCHES.get(name)
    if dataclasses.is_dataclass(bench) and not isinstance(bench, type):
        left = limit if deadline is None else min(limit, deadline - time.time())
        knobs = {"instances": resolved.get("instances"), "max_seconds": left}
        fields = {f.name for f in dataclasses.fields(bench)}
        bench = dataclasses.replace(bench, **{k: v for k, v in knobs.items() if k in fields})
    return bench


def _record(row: BenchRow) -> dict[str, Any]:
    out = dataclasses.asdict(row)
    out["ci95"] = [round(v, 4) for v in row.ci95]
    out["curve"] = [list(point) for point in row.curve]
    return out


def evaluate_external(ctx: StageContext, resolved: dict[str, Any]) -> dict[str, Any]:
    """Score the resolved sides on the data set (see the module docstring); the stage's result."""
    name = resolved["external"]
    # A data set's bench scores trained models when it has `score`.
    bench = _bench(name, resolved, ctx.deadline, ctx.settings.max_seconds)
    score = getattr(bench, "score", None)
    if score is None:
        raise StageFailure("bad_input", f"bench {resolved['bench']}: {name} cannot score a router")
    models = []
    for side in ("router", "baseline"):
        info = resolved[side]
        if "policy" in info:
            # A train run's corpus: what it trained on, which must not hold the anchors.
            corpus = ctx.settings.run_dir(info["run_id"]) / CORPUS if "run_id" in info else None
            models.append(
                Scored(side, load_policy(info["policy"]), info.get("knobs") or {}, corpus)
            )
    seeds = [resolved["seed"] + r for r in range(resolved["repeats"])]
    data = Path(resolved["data"]) if resolved.get("data") else None
    try:
        rows: list[BenchRow] = score(ctx.stage_dir, data, models, seeds, log.info)
    except ScoreRefused as exc:
        raise StageFailure("bad_input", f"bench {resolved['bench']}: {exc}") from None
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
    direction = "" if router["higher_is_better"] else " (lower is better)"
    ctx.note(
        f"{name} {router['metric']}{direction} on {', '.join(r.anchors for r in routed)}: router "
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
    router = _side(
        resolved["router"]["ref"], resolved["router"]["policy"]["type"], by_method["router"]
    )
    base_info = resolved["baseline"]
    if "policy" in base_info:
        baseline = _side(base_info["ref"], base_info["policy"]["type"], by_method["baseline"])
    else:
        baseline = _side(base_info["ref"], "baseline", by_method[base_info["baseline"]])
    same_metric = router["metric"] == baseline["metric"]
    higher = router["higher_is_better"]
    difference = round(router["anchor_score"] - baseline["anchor_score"], 4)
    better = None
    if same_metric:
        ahead = difference if higher else -difference
        better = "router" if ahead > 0 else "baseline" if ahead < 0 else "tie"
    delta = {
        "anchor_score": {
            "value": difference if same_metric else None,
            "ci95": None,
            "higher_is_better": higher,
            "better": better,
        }
    }
    metrics = dict.fromkeys((router["metric"], baseline["metric"], *(r.metric for r in rows)))
    notes = [METRIC_NOTES[m] for m in metrics if m in METRIC_NOTES]
    return {
        "format": sc.FORMAT,
        "run_id": run_id,
        "bench": resolved["bench"],
        "external": resolved["external"],
        "metric": router["metric"],
        "higher_is_better": higher,
        "data": resolved.get("data"),
        "repeats": resolved["repeats"],
        **sc.headline(router),
        "baseline_anchor_score": baseline["anchor_score"],
        "delta": delta,
        "router": router,
        "baseline": baseline,
        "methods": [_record(row) for row in rows],
        "best": _best(rows),
        "notes": notes,
    }
