"""Scoring rows with a policy, one sample per example, through a cache keyed by model hash.

A sample: `{example_hash, candidates, scores, pick, action, correct, world, family}`. The example
hash is sha256 of the state and the candidates (what the model sees), so the same anchors give the
same hashes in every run. The label (`action`) is never cached: correctness is recomputed against
the row.

The cache lives in the run directories, like every other run output (SPEC §3.1: nothing is
written outside a run's directory): a run appends the scores it computes, batch by batch, to its
own `<run_dir>/evaluate/sample_cache/<model_hash>.jsonl`, and reads back that file of every run
under RUNS_DIR. So a bench re-run for the same model hash and anchors reads its samples from the
first run and runs no forward pass, and a run interrupted half-way (re-queued into the same run
directory) resumes where it stopped. Deleting a run deletes its share of the cache with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core.paths import under
from core.rundir import atomic_file
from worker.models.policy import Policy, argmax

BATCH = 64
CACHE_DIR = Path("evaluate") / "sample_cache"  # in a run directory


def example_hash(state: str, tools: Sequence[str]) -> str:
    return hashlib.sha256((state + "\x1f" + "\x1e".join(tools)).encode()).hexdigest()


class SampleCache:
    """Scores per example for one model: written to `path` (None keeps nothing), read back from
    `path` and from `read_also` (other runs' caches of the same model hash)."""

    def __init__(self, path: Path | None, read_also: Sequence[Path] = ()) -> None:
        self.path = Path(path) if path else None
        self.rows: dict[str, dict[str, Any]] = {}
        for source in [*read_also, *([self.path] if self.path else [])]:
            self._read(source)

    def _read(self, path: Path) -> None:
        try:
            fh = path.open(encoding="utf-8")
        except OSError:  # not there (yet), or a run deleted while we looked
            return
        with fh:
            for line in fh:
                try:
                    row = json.loads(line)
                    self.rows[row["example_hash"]] = row
                except (ValueError, KeyError, TypeError):  # a torn last line of a killed run
                    continue

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


def run_sample_cache(runs_dir: Path, run_dir: Path, model_hash: str) -> SampleCache:
    """The cache of `model_hash` for a run: its own file, plus every other run's for that hash."""
    name = f"{model_hash}.jsonl"
    own = Path(run_dir) / CACHE_DIR / name
    found = Path(runs_dir).glob(f"*/{CACHE_DIR.as_posix()}/{name}")
    # Each file must resolve inside its own run's directory: a symlink planted in a run
    # directory never makes the cache read a file from elsewhere.
    others = sorted(
        p
        for p in found
        if p.resolve() != own.resolve() and under(p.parents[len(CACHE_DIR.parts)], p)
    )
    return SampleCache(own, others)


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
    with atomic_file(path) as fh:
        for row in samples:
            fh.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
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
