"""What every external bench shares: the row of its report and the methods it trains.

A bench answers `run(work, data, methods, seeds, log)` with `BenchRow`s: one per (anchor set,
method, metric), the community's figure averaged over the seeds with its 95% interval.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core.schemas.corpus import Knobs
from worker.models.policy import Policy

# The learned methods every external bench trains on its own corpus; baselines are its own.
LEARNED = ("gbdt", "trm", "trm-1step", "qlora")
ONE_STEP = {"n_recursions": 1, "cycles": 1, "supervision_steps": 1}

Log = Callable[[str], None]


@dataclass
class BenchRow:
    """One figure of an external bench's report."""

    dataset: str  # routellm, bfcl, jobshop
    anchors: str  # the anchor set scored: `mmlu-unseen-subjects`, `gsm8k`, `taillard-15x15`, ...
    method: str  # a baseline's name or one of LEARNED
    metric: str  # the community's metric: apgr, accuracy, mean_gap, ...
    value: float
    ci95: tuple[float, float]
    n: int  # examples (rows, instances) scored
    seeds: int  # seeds averaged (1 for a deterministic baseline)
    train_seconds: float | None = None
    higher_is_better: bool = True
    extra: dict[str, float] = field(default_factory=dict)  # other figures (cpt50, abstain recall)
    # A curve a plot draws, as (x, y) points (routing: share of strong calls, quality).
    curve: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Scored:
    """A model trained elsewhere that a bench scores beside its baselines (a service bench's
    router): its name in the report, the policy, and the corpus knobs its rows were shaped by."""

    name: str
    policy: Policy
    knobs: dict[str, Any] = field(default_factory=dict)
    # The corpus folder it trained on (train.jsonl, val.jsonl), when known: a bench refuses a
    # model that trained on its anchors.
    corpus: Path | None = None


class ScoreRefused(Exception):
    """What a bench was asked to score cannot be scored as asked (a model trained on the
    anchors, more work than the time allowed); the message says what to change."""


def reshaping(knobs: dict[str, Any]) -> dict[str, Any]:
    """The corpus knobs that change how a row reads, of those given: the ones off their default
    (a train run's manifest lists every knob)."""
    defaults = Knobs().model_dump()
    return {k: v for k, v in knobs.items() if k not in defaults or v != defaults[k]}


def trained_envs(corpus: Path | None) -> set[str]:
    """The envs of a corpus's train and val rows (none when the corpus is not known)."""
    if corpus is None:
        return set()
    envs = set()
    for split in ("train.jsonl", "val.jsonl"):
        path = corpus / split
        if path.is_file():
            with path.open(encoding="utf-8") as lines:
                envs |= {json.loads(line)["meta"]["env"] for line in lines if line.strip()}
    return envs


class ExternalBench(Protocol):
    name: str

    def run(
        self, work: Path, data: Path | None, methods: list[str], seeds: list[int], log: Log
    ) -> list[BenchRow]: ...


def qlora_sizing() -> dict[str, Any]:
    """The QLoRA demo's adapter (`specs/train-routerbench-qlora.json`: the built-in SmolLM2, 30
    steps of 8 rows), so that every bench reports the same adapter and it finishes on a CPU."""
    spec = Path(__file__).resolve().parents[2] / "specs" / "train-routerbench-qlora.json"
    return dict(json.loads(spec.read_text())["qlora"])


def train_policy(
    method: str,
    corpus: Path,
    out: Path,
    seed: int,
    config: dict[str, Any] | None = None,
    model_cache: Path | None = None,
) -> tuple[Policy, float]:
    """Train one of LEARNED on a corpus folder (train.jsonl, val.jsonl) and load it as a policy:
    (the policy, its training seconds). `config` is the trainer's own knobs."""
    from worker.evaluate.policies import load_policy
    from worker.train.callbacks import TrainerCallbacks

    started = time.perf_counter()
    knobs = dict(config or {})
    if method == "gbdt":
        from worker.train import gbdt

        gbdt.train(knobs, corpus, out, TrainerCallbacks(), seed=seed)
        ref: dict[str, Any] = {"type": "gbdt", "path": str(out)}
    elif method in ("trm", "trm-1step"):
        from worker.train import trm

        if method == "trm-1step":
            knobs = {**knobs, **ONE_STEP}
        trm.train(knobs, corpus, out, TrainerCallbacks(), seed=seed)
        ref = {"type": "trm", "path": str(out)}
    elif method == "qlora":
        from worker.train import qlora

        cache = model_cache or out.parent / "models"
        qlora.train(
            {**qlora_sizing(), **knobs},
            corpus,
            out,
            TrainerCallbacks(),
            seed=seed,
            contract="action_only",
            probe=False,
            model_cache=cache,
        )
        ref = {
            "type": "qlora",
            "path": str(out / "adapter"),
            "contract": "action_only",
            "model_cache": str(cache),
        }
    else:
        raise ValueError(f"unknown method {method!r}; learned methods: {', '.join(LEARNED)}")
    seconds = time.perf_counter() - started
    return load_policy(ref), seconds
