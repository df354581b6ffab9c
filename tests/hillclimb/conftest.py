"""Fixtures for the search tests: a real migrated database with a real search run row, and a
candidate launcher whose "training" and corpus are pure functions of the candidate's knobs and
rung."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core.db import make_engine, upgrade
from core.events import Publisher
from core.models import Run
from core.schemas.hillclimb import HillclimbSpec
from core.settings import Settings
from worker.hillclimb.ladder import TRAINER_PREFIX
from worker.hillclimb.launch import Outcome
from worker.hillclimb.ledger import Ledger
from worker.hillclimb.screen import Screen
from worker.hillclimb.search import SearchRun

Score = Callable[[dict[str, Any], int], dict[str, float] | None]
Corpus = Callable[[dict[str, Any], int], Any]


def every_knob(knobs: dict[str, Any], rung: int) -> Any:
    """The default corpus: every data knob and the rung change it."""
    return [rung, {k: v for k, v in knobs.items() if not k.startswith(TRAINER_PREFIX)}]


def base_train(anchor: list[str] | None = None) -> dict[str, Any]:
    return {
        "trainer": "trm",
        "corpus": {
            "sources": [{"type": "trm_play_root", "name": "play", "path": "/data/play"}],
            "split": {"by": "env", "anchor": anchor if anchor is not None else ["route-s0-w5"]},
        },
        "trm": {"epochs": 1},
    }


def search_spec(**overrides: Any) -> HillclimbSpec:
    body: dict[str, Any] = {
        "kind": "hillclimb",
        "base": base_train(),
        "patience": 3,
        "max_candidates": 12,
        "noise_margin": 0.02,
        "max_generalization_gap": 0.2,
        "seed": 7,
    }
    body.update(overrides)
    return HillclimbSpec.model_validate(body)


def knobs_of(body: dict[str, Any]) -> dict[str, Any]:
    return dict(body["corpus"]["knobs"])


def rung_of(body: dict[str, Any]) -> int:
    """The rung a child spec was built for, read back from its split (default ladder)."""
    knobs = body["corpus"]["knobs"]
    level = body["corpus"]["split"]["by"]
    table = {
        ("episode", 1, "full"): 0,
        ("episode", 3, "full"): 1,
        ("run", 1, "keys"): 2,
        ("env", 1, "keys"): 3,
        ("env", 2, "keys"): 4,
        ("env", 3, "minimal"): 5,
    }
    return table.get((level, knobs["heldout_breadth"], knobs["state_compression"]), -1)


@dataclass
class ChildRun:
    run_id: str
    body: dict[str, Any]
    started: datetime
    ready_at: float


@dataclass
class FakeLauncher:
    """Candidates 'train' for `seconds` and score by `score(knobs, rung)` (None: the run fails);
    their corpus is whatever `corpus(knobs, rung)` returns, hashed.

    `world` is the set of child runs that exist, shared between launchers the way the database
    is shared between a killed coordinator and its resumed successor.
    """

    score: Score
    seconds: float = 0.0
    corpus: Corpus = every_knob
    effects: dict[str, Any] = field(default_factory=dict)  # the corpus manifest's knob effects
    world: dict[str, ChildRun] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    def launch(self, candidate_id: str, body: dict[str, Any]) -> str:
        if candidate_id not in self.world:
            self.created.append(candidate_id)
            self.world[candidate_id] = ChildRun(
                f"run-{candidate_id}", body, datetime.now(UTC), time.monotonic() + self.seconds
            )
        return self.world[candidate_id].run_id

    def poll(self, run_ids: list[str]) -> dict[str, Outcome]:
        ended = {}
        for child in self.world.values():
            if child.run_id not in run_ids or time.monotonic() < child.ready_at:
                continue
            scores = self.score(knobs_of(child.body), rung_of(child.body))
            now = datetime.now(UTC)
            if scores is None:
                ended[child.run_id] = Outcome("failed", {}, None, child.started, now, "crash")
            else:
                hash_ = self.corpus_hash(child.body)
                ended[child.run_id] = Outcome("completed", scores, hash_, child.started, now)
        return ended

    def corpus_hash(self, body: dict[str, Any]) -> str:
        made = self.corpus(knobs_of(body), rung_of(body))
        return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()

    def screen(self, body: dict[str, Any]) -> Screen | None:
        return Screen(self.corpus_hash(body), self.effects)

    def cancel(self, run_ids: list[str]) -> None:
        self.cancelled.extend(run_ids)

    def stop_reason(self) -> str | None:
        return None


def scores(anchor: float, train: float | None = None, **extra: float) -> dict[str, float]:
    train = anchor + 0.05 if train is None else train
    return {
        "anchor_score": anchor,
        "train_score": train,
        "generalization_gap": train - anchor,
        "failure_rate": extra.get("failure_rate", 0.1),
        "recovery_rate": extra.get("recovery_rate", 0.5),
    }


@pytest.fixture
def search_db(tmp_path: Path) -> Callable[..., SearchRun]:
    """Make a coordinator over a real SQLite database holding one running search run."""
    url = f"sqlite:///{tmp_path}/trm.db"
    upgrade(url)
    settings = Settings(database_url=url, runs_dir=tmp_path / "runs")  # type: ignore[call-arg]
    publisher = Publisher(make_engine(url), None, settings)
    made: dict[str, Run] = {}

    def make(spec: HillclimbSpec, launcher: FakeLauncher, **kw: Any) -> SearchRun:
        if "run" not in made:
            run = Run(kind="hillclimb", status="running", queue="cpu", spec={}, spec_hash="x")
            with publisher.transaction() as tx:
                tx.add_run(run, {"status": "running"})
            made["run"] = run
        run_id = made["run"].id
        run_dir = settings.run_dir(run_id)
        return SearchRun(
            spec=spec,
            search_id=run_id,
            run_dir=run_dir,
            ledger=Ledger(publisher, run_id, run_dir),
            launcher=launcher,
            poll_s=kw.pop("poll_s", 0.01),
            **kw,
        )

    return make
