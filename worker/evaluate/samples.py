"""Scoring rows with a policy, one sample per example, through a cache keyed by model hash.

A sample: `{example_hash, candidates, scores, pick, action, correct, world, family}`. The example
hash is sha256 of the state and the candidates (what the model sees), so the same anchors give the
same hashes in every run. Samples of a model are cached in
`DATA_DIR/cache/samples/<model_hash>.jsonl` (appended batch by batch): a bench re-run for the
same model hash and anchors reads its samples back and runs no forward pass, and a run
interrupted half-way resumes where it stopped. The label (`action`) is never cached:
correctness is recomputed against the row.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from worker.evaluate.policies import Policy, argmax

BATCH = 64


def example_hash(state: str, tools: Sequence[str]) -> str:
    return hashlib.sha256((state + "\x1f" + "\x1e".join(tools)).encode()).hexdigest()


class SampleCache:
    """Scores per example for one model; `None` cache dir keeps nothing."""

    def __init__(self, cache_dir: Path | None, model_hash: str) -> None:
        self.path = Path(cache_dir) / f"{model_hash}.jsonl" if cache_dir else None
        self.rows: dict[str, dict[str, Any]] = {}
        if self.path and self.path.exists():
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        row = json.loads(line)
                    except ValueError:  # a torn last line from an interrupted run
                        continue
                    self.rows[row["example_hash"]] = row

    def get(self, key: str, tools: Sequence[str]) -> dict[str, Any] | None:
        row = self.rows.get(key)
        return row if row is not None and row.get("candidates") == list(tools) else None

    def add(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.rows[row["example_hash"]] = row
        if self.path is None or not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


def score_rows(
    policy: Policy,
    rows: Sequence[dict[str, Any]],
    cache: SampleCache,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], str | None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(one sample per row, counters {scored, cached, tokens_scored})."""
    keys = [example_hash(r["state"], r["tools"]) for r in rows]
    todo = [
        i for i, (k, r) in enumerate(zip(keys, rows, strict=True)) if not cache.get(k, r["tools"])
    ]
    counters = {"scored": 0, "cached": len(rows) - len(todo), "tokens_scored": 0}
    for start in range(0, len(todo), BATCH):
        if should_stop and should_stop():
            break
        batch = todo[start : start + BATCH]
        states = [rows[i]["state"] for i in batch]
        tools = [list(rows[i]["tools"]) for i in batch]
        scores = policy.scores_batch(states, tools)
        fresh = []
        for i, s, t in zip(batch, scores, tools, strict=True):
            fresh.append(
                {
                    "example_hash": keys[i],
                    "candidates": t,
                    "scores": [round(float(x), 5) for x in s],
                    "pick": t[argmax(s)],
                }
            )
            counters["tokens_scored"] += (len(rows[i]["state"]) + sum(map(len, t))) // 4
        cache.add(fresh)
        counters["scored"] += len(batch)
        if progress:
            progress(counters["cached"] + counters["scored"], len(rows))
    samples = []
    for key, row in zip(keys, rows, strict=True):
        hit = cache.get(key, row["tools"])
        if hit is None:  # stopped before this one
            continue
        meta = row.get("meta") or {}
        samples.append(
            {
                **hit,
                "action": row["action"],
                "correct": hit["pick"] == row["action"],
                "world": meta.get("world_id") or meta.get("env"),
                "family": meta.get("family"),
                "kind": meta.get("kind"),
            }
        )
    return samples, counters


def write_samples(path: Path, samples: list[dict[str, Any]]) -> Path:
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in samples:
            fh.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


class CachedPolicy(Policy):
    """`policy` through the sample cache: rollouts of a cached model run no forward pass."""

    def __init__(self, policy: Policy, cache: SampleCache) -> None:
        super().__init__()
        self.inner, self.cache = policy, cache
        self.name, self.model_hash = policy.name, policy.model_hash

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        keys = [example_hash(s, t) for s, t in zip(states, tools, strict=True)]
        todo = [i for i, k in enumerate(keys) if self.cache.get(k, tools[i]) is None]
        if todo:
            scores = self.inner.scores_batch([states[i] for i in todo], [tools[i] for i in todo])
            self.cache.add(
                [
                    {
                        "example_hash": keys[i],
                        "candidates": list(tools[i]),
                        "scores": [round(float(x), 5) for x in s],
                        "pick": tools[i][argmax(s)],
                    }
                    for i, s in zip(todo, scores, strict=True)
                ]
            )
        return [self.cache.rows[k]["scores"] for k in keys]
