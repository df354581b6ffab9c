"""A policy scored on a corpus (SPEC §7): `evaluate_policy` on a train sample and the anchors,
with rollouts in the anchor worlds; the `evaluate` stage of a train run and the bench kind share it.

- train_score: a fixed, seeded sample of up to TRAIN_SAMPLE train rows.
- anchor_score: anchor.jsonl; a corpus without an anchor split is scored on val.jsonl and the
  scorecard says so (`anchor_split: "val"`).
- failure_rate / recovery_rate: rollouts in the anchor worlds when they are worker/envs worlds and
  the rows' source can be replayed (not a `normalized` results export); otherwise from tagged
  rows: failure = the policy repeats a known bad pick (critic rows of the anchor groups),
  recovery = it gets rows tagged `recovery` right.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.rundir import ANCHOR_ROWS, CRITIC_ROWS, VAL_ROWS
from worker.evaluate import scorecard as sc
from worker.evaluate.rollouts import EPISODES, env_world, replayable, world_rates
from worker.evaluate.samples import CachedPolicy, SampleCache, read_jsonl, score_rows
from worker.models.policy import Policy, argmax

TRAIN_SAMPLE = 1000


def critic_rows(corpus_dir: Path) -> list[dict[str, Any]]:
    """The corpus's known-bad picks (`critic.jsonl`) for the tagged failure rate; [] if none."""
    path = Path(corpus_dir) / CRITIC_ROWS
    return read_jsonl(path) if path.exists() else []


def train_sample(rows: list[dict[str, Any]], seed: int, limit: int = TRAIN_SAMPLE) -> list[dict]:
    if len(rows) <= limit:
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
    return [rows[i] for i in keep]


def anchor_rows(corpus_dir: Path) -> tuple[list[dict[str, Any]], str]:
    anchor = corpus_dir / ANCHOR_ROWS
    rows = read_jsonl(anchor) if anchor.exists() else []
    if rows:
        return rows, "anchor"
    val = corpus_dir / VAL_ROWS
    return (read_jsonl(val) if val.exists() else []), "val"


def policy_ref(resolved: dict[str, Any]) -> dict[str, Any]:
    """The trained model of a train run, from its resolved config."""
    out = Path(resolved["output_dir"])
    if resolved["trainer"] in ("trm", "gbdt"):
        return {"type": resolved["trainer"], "path": str(out)}
    return {
        "type": "qlora",
        "path": str(out / "adapter"),
        "contract": resolved.get("contract", "action_only"),
        "model_cache": resolved.get("model_cache"),
    }


def evaluate_policy(
    policy: Policy,
    train: list[dict[str, Any]],
    anchors: list[dict[str, Any]],
    anchor_split: str,
    corpus: dict[str, Any],
    cache: SampleCache,
    *,
    critic: list[dict[str, Any]] | None = None,
    seed: int = 0,
    episodes: int = EPISODES,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], str | None] | None = None,
    on_pass: Callable[[str, int, int, str], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, int]]:
    """(scorecard, anchor samples, counters). `progress(rows scored, rows)` as rows are scored;
    `on_pass(name, done, total, unit)` for what runs after them (the rollouts, world by world)."""
    total = len(train) + len(anchors)

    def step(offset: int) -> Callable[[int, int], None] | None:
        return (lambda done, _n: progress(offset + done, total)) if progress else None

    train_samples, c1 = score_rows(policy, train, cache, step(0), should_stop)
    anchor_samples, c2 = score_rows(policy, anchors, cache, step(len(train)), should_stop)
    counters = {k: c1[k] + c2[k] for k in c1}
    train_score = sc.score([float(s["correct"]) for s in train_samples])
    anchor_score = sc.score([float(s["correct"]) for s in anchor_samples])
    card: dict[str, Any] = {
        "format": sc.FORMAT,
        "model": {"name": policy.name, "model_hash": policy.model_hash},
        "anchor_split": anchor_split,
        "scores": {"train_score": train_score, "anchor_score": anchor_score},
        "per_family": _per_family(train_samples, anchor_samples),
        "per_world": {w: {"anchor_score": s} for w, s in _by(anchor_samples, "world").items()},
        "notes": [],
    }
    if anchor_split != "anchor":
        card["notes"].append("the corpus has no anchor split: anchor_score is on val.jsonl")
    cached = CachedPolicy(policy, cache)
    rates = rollout_rates(cached, anchors, corpus, seed, episodes, should_stop, on_pass)
    if rates is None:
        rates = tagged_rates(anchor_samples, critic or [], anchor_split, cached)
    failure, recovery, per_world, source = rates
    card["scores"]["failure_rate"] = {**failure, "source": source}
    card["scores"]["recovery_rate"] = {**recovery, "source": source}
    for world, values in per_world.items():
        card["per_world"].setdefault(world, {}).update(values)
    card["scores"]["generalization_gap"] = sc.difference(train_score, anchor_score)
    for key, value in card["scores"].items():
        card[key] = value["value"]
    card["n"] = {"train": train_score["n"], "anchor": anchor_score["n"]}
    return card, anchor_samples, counters


def _by(samples: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return sc.grouped((str(s.get(key)), float(s["correct"])) for s in samples)


def _per_family(train: list[dict], anchors: list[dict]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, samples in (("train_score", train), ("anchor_score", anchors)):
        for family, value in _by(samples, "family").items():
            out.setdefault(family, {})[name] = value
    return out


def rollout_rates(
    policy: Policy,
    anchors: list[dict[str, Any]],
    corpus: dict[str, Any],
    seed: int,
    episodes: int,
    should_stop: Callable[[], str | None] | None = None,
    on_pass: Callable[[str, int, int, str], None] | None = None,
) -> tuple[dict, dict, dict, str] | None:
    """Rollouts in the anchor worlds named by the rows (None: the rows name no env world)."""
    sources = {s["name"]: s for s in corpus.get("sources", [])}
    knobs = corpus.get("knobs") or {}
    worlds: dict[str, tuple[Any, dict[str, Any], list[str]]] = {}
    for row in anchors:
        meta = row.get("meta") or {}
        wid = meta.get("world_id") or meta.get("env")
        if not isinstance(wid, str) or wid in worlds:
            continue
        if not replayable(sources.get(meta.get("source_name"))):
            continue
        world = env_world(wid)
        if world is not None:
            worlds[wid] = (world, sources[meta["source_name"]], list(row["tools"]))
    if not worlds:
        return None
    failures, recoveries, per_world = [], [], {}
    for done, (wid, (world, source, tools)) in enumerate(sorted(worlds.items())):
        if should_stop and should_stop():
            break
        if on_pass:
            on_pass("rollouts", done, len(worlds), "worlds")
        routes = tools if source.get("type") == "router_jsonl" else None
        rates = world_rates(policy, world, source, knobs, episodes, seed, routes)
        failures += rates["failure"]
        recoveries += rates["recovery"]
        per_world[wid] = {
            "failure_rate": sc.score(rates["failure"]),
            "recovery_rate": sc.score(rates["recovery"]),
            "success_rate": sc.score(rates["success"]),
        }
    if on_pass:
        on_pass("rollouts", len(worlds), len(worlds), "worlds")
    return sc.score(failures), sc.score(recoveries), per_world, "rollouts"


def tagged_rates(
    anchor_samples: list[dict[str, Any]],
    critic: list[dict[str, Any]],
    split: str,
    policy: Policy,
) -> tuple[dict, dict, dict, str]:
    bad = [r for r in critic if (r.get("meta") or {}).get("split") == split]
    repeated = []
    if bad:
        scores = policy.scores_batch([r["state"] for r in bad], [r["tools"] for r in bad])
        repeated = [
            float(r["tools"][argmax(s)] == r["action"]) for r, s in zip(bad, scores, strict=True)
        ]
    recovered = [float(s["correct"]) for s in anchor_samples if s.get("kind") == "recovery"]
    return sc.score(repeated), sc.score(recovered), {}, "tagged_rows"
