"""The `jobshop` external bench: dispatchers trained on CP-SAT's schedules of small random
instances, rolled out on the published benchmarks, scored by the makespan's gap.

- **Training**: a `jobshop` corpus source (worker/external/jobshop_source.py) generates
  `train_count` Taillard-style instances (sizes from `train_jobs` x `train_machines`) in a
  folder of `<work>` named after those knobs (or reads the instance files of the `data` path
  given), has CP-SAT solve each within `solve_seconds` (cached beside them: a second run solves
  nothing), and replays each schedule as dispatching decisions; the corpus is split by
  instance (env), a fifth of them for validation. gbdt, trm and trm-1step are trained on it
  afresh by `train_policy`, one model per seed.
- **Anchors**: `taillard-15x15` (ta01-ta10), `taillard-20x20` (ta21-ta30), and any other set
  of `ANCHORS` asked for; never trained on (another size, another generator).
- **Rollout**: every operation dispatched by the controller under the scheme the corpus was
  replayed under (`active`, Giffler-Thompson, by default; see jobshop_dispatch.py); the makespan
  at the end; gap = makespan / reference - 1, the reference being the proven optimum, else the
  best known upper bound (ta22, ta23, ta25-ta27, ta29, ta30 have no proven optimum).
- **Baselines**, by the same rollout, under both schemes: SPT, LPT, MWKR, LWKR, MOR, LOR, FIFO
  (deterministic) and random (one per seed); a method's name says its scheme (`MWKR/non-delay`).
  Published learned dispatchers are printed for reference, never reported as ours.
- **Figures**: per anchor set and method, the mean gap over the instances (each instance's
  gap first averaged over the seeds) with a bootstrap 95% interval over the instances (10,000
  resamples); `extra` has each seed's mean gap and the rollout's seconds per instance.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.schemas.corpus import CorpusSpec
from worker.external.common import LEARNED, BenchRow, Log, train_policy
from worker.external.jobshop_dispatch import (
    RULES,
    SCHEMES,
    Scheme,
    random_rule,
    run_policy,
    run_rule,
)
from worker.external.jobshop_instances import Instance, benchmark

ANCHORS: dict[str, list[str]] = {
    "taillard-15x15": [f"ta{i:02d}" for i in range(1, 11)],
    "taillard-20x20": [f"ta{i}" for i in range(21, 31)],
    "taillard-30x15": [f"ta{i}" for i in range(41, 51)],
    "lawrence-10x10": [f"la{i}" for i in range(16, 21)],
    "lawrence-15x15": [f"la{i}" for i in range(36, 41)],
    "ft10": ["ft10"],
}
DEFAULT_ANCHORS = ("taillard-15x15", "taillard-20x20")
# Mean gaps the learned dispatchers' papers report (L2D: Zhang et al., NeurIPS 2020; Wheatley:
# Infantes et al. 2024), for reference only: other training, other rollouts.
PUBLISHED: dict[str, dict[str, float]] = {
    "L2D": {"taillard-15x15": 0.267, "taillard-20x20": 0.290},
    "Wheatley": {"taillard-15x15": 0.177, "taillard-20x20": 0.240},
}
RESAMPLES = 10_000


def scheme_name(scheme: Scheme) -> str:
    return scheme.replace("_", "-")


def bootstrap_ci(values: list[float], seed: int = 0) -> tuple[float, float]:
    """The 95% interval of the mean by resampling the values (percentile bootstrap)."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (0.0, 0.0)
    data = np.asarray(values, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(data), size=(RESAMPLES, len(data)))
    means = data[picks].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def gaps(instances: list[Instance], makespans: list[int]) -> list[float]:
    out = []
    for instance, makespan in zip(instances, makespans, strict=True):
        reference = instance.reference
        if not reference:
            raise ValueError(f"{instance.name} has no known optimum or upper bound")
        out.append(makespan / reference - 1)
    return out


@dataclass
class JobShopBench:
    """The bench's knobs, each with the default the report uses."""

    name: str = "jobshop"
    anchors: tuple[str, ...] = DEFAULT_ANCHORS
    train_count: int = 150
    train_jobs: tuple[int, int] = (6, 15)
    train_machines: tuple[int, int] = (5, 15)
    train_seed: int = 0
    solve_seconds: float = 1.5
    scheme: Scheme = "active"
    # Trainer knobs per learned method (train_policy's `config`).
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def corpus(self, work: Path, data: Path | None, log: Log) -> Path:
        """Build (or reuse) the training corpus: the instances' folder keeps their solutions."""
        from worker.corpus import build_corpus

        source: dict[str, Any] = {
            "type": "jobshop",
            "name": "jobshop",
            "solve_seconds": self.solve_seconds,
            "scheme": self.scheme,
        }
        if data is not None:
            source["path"] = str(data)
        else:
            # One folder per generation: the source reads every instance file of its folder.
            (j0, j1), (m0, m1) = self.train_jobs, self.train_machines
            sizes = f"{j0}-{j1}x{m0}-{m1}"
            source["path"] = str(
                work / f"jobshop-instances-{self.train_seed}-{self.train_count}-{sizes}"
            )
            source["generate"] = {
                "count": self.train_count,
                "jobs": list(self.train_jobs),
                "machines": list(self.train_machines),
                "seed": self.train_seed,
            }
        spec = CorpusSpec.model_validate({
            "sources": [source], "split": {"by": "env", "seed": 0, "val_fraction": 0.2},
            "min_exact_positives": 0,
        })  # fmt: skip
        out = work / f"jobshop-corpus-{Path(source['path']).name}-{self.scheme}"
        started = time.perf_counter()
        result = build_corpus(spec, out)
        counts = result.counters
        log(f"jobshop corpus: {counts.get('train')} train / {counts.get('val')} val "
            f"rows from {source['path']} in {time.perf_counter() - started:.0f} s")  # fmt: skip
        return out

    def run(
        self, work: Path, data: Path | None, methods: list[str], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        work.mkdir(parents=True, exist_ok=True)
        sets = {name: benchmark(ANCHORS[name]) for name in self.anchors}
        for method, figures in PUBLISHED.items():
            shown = ", ".join(f"{k} {v:.1%}" for k, v in figures.items())
            log(f"published, for reference (not measured here): {method} {shown}")
        rows = self._rules(sets, seeds, log)
        learned = [m for m in methods if m in LEARNED]
        if "qlora" in learned:
            log("jobshop: qlora skipped (hundreds of sequential generations per instance)")
            learned.remove("qlora")
        if learned:
            corpus = self.corpus(work, data, log)
            for method in learned:
                rows += self._learned(method, corpus, work, sets, seeds, log)
        return rows

    def _rules(self, sets: dict[str, list[Instance]], seeds: list[int], log: Log) -> list[BenchRow]:
        rows = []
        for anchors, instances in sets.items():
            for scheme in SCHEMES:
                for rule_name, rule in RULES.items():
                    started = time.perf_counter()
                    found = gaps(instances, [run_rule(x, rule, scheme) for x in instances])
                    seconds = (time.perf_counter() - started) / len(instances)
                    rows.append(self._row(anchors, f"{rule_name}/{scheme_name(scheme)}",
                                          [[g] for g in found], 1, None, seconds))  # fmt: skip
                per_seed = [
                    gaps(instances, [run_rule(x, random_rule(s), scheme) for x in instances])
                    for s in seeds
                ]
                per_instance = [list(g) for g in zip(*per_seed, strict=True)]
                rows.append(self._row(anchors, f"random/{scheme_name(scheme)}", per_instance,
                                      len(seeds), None, 0.0))  # fmt: skip
            best = min((r for r in rows if r.anchors == anchors), key=lambda r: r.value)
            log(f"{anchors}: best rule {best.method} {best.value:.1%}")
        return rows

    def _learned(
        self, method: str, corpus: Path, work: Path, sets: dict[str, list[Instance]],
        seeds: list[int], log: Log,
    ) -> list[BenchRow]:  # fmt: skip
        per_set: dict[str, list[list[float]]] = {k: [[] for _ in v] for k, v in sets.items()}
        seconds: dict[str, float] = dict.fromkeys(sets, 0.0)
        trained = []
        for seed in seeds:
            out = work / f"jobshop-{method}-{self.scheme}-{seed}"
            shutil.rmtree(out, ignore_errors=True)  # a model of another corpus must not resume
            policy, spent = train_policy(method, corpus, out, seed, self.configs.get(method))
            trained.append(spent)
            for anchors, instances in sets.items():
                started = time.perf_counter()
                makespans = run_policy(instances, policy.scores_batch, self.scheme)
                seconds[anchors] += (time.perf_counter() - started) / len(instances)
                found = gaps(instances, makespans)
                for i, g in enumerate(found):
                    per_set[anchors][i].append(g)
                log(f"  {method} seed {seed} {anchors}: mean gap {np.mean(found):.1%} "
                    f"(train {spent:.0f} s)")  # fmt: skip
        train_seconds = float(np.mean(trained))
        name = f"{method}/{scheme_name(self.scheme)}"
        return [
            self._row(
                anchors,
                name,
                per_set[anchors],
                len(seeds),
                train_seconds,
                seconds[anchors] / len(seeds),
            )  # fmt: skip
            for anchors in sets
        ]

    def _row(
        self, anchors: str, method: str, per_instance: list[list[float]], seeds: int,
        train_seconds: float | None, rollout_seconds: float,
    ) -> BenchRow:  # fmt: skip
        means = [float(np.mean(g)) for g in per_instance]
        extra = {"rollout_seconds_per_instance": round(rollout_seconds, 4)}
        if seeds > 1:
            for k in range(seeds):
                extra[f"seed{k}_mean_gap"] = float(np.mean([g[k] for g in per_instance]))
        return BenchRow(
            dataset="jobshop", anchors=anchors, method=method, metric="mean_gap",
            value=float(np.mean(means)), ci95=bootstrap_ci(means), n=len(means), seeds=seeds,
            train_seconds=train_seconds, higher_is_better=False, extra=extra,
        )  # fmt: skip


BENCH = JobShopBench()
