"""What a kind of run is (SPEC §3.2): its stages in order, its dry-run planner, and the little the
runner asks of it instead of knowing it (the card's `data` line, extra fields of summary.json).

Each kind is one file beside this one, importing this module (and, for the bench's
`train_router`, the train kind's stages, reused as they are); `worker/kinds/__init__.py` lists
them. A stage is a plain function `(context, spec) -> dict`; one that trains or scores
imports torch inside itself, so that the worker process never loads it (the stage's child does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.context import StageContext

StageFn = Callable[[StageContext, dict[str, Any]], dict[str, Any] | None]
# A dry run (SPEC §3.2): resolve and validate, train nothing; a note per stage for its manifest.
Planner = Callable[[StageContext, dict[str, Any]], dict[str, str]]


@dataclass(frozen=True)
class StageDef:
    name: str
    fn: StageFn
    in_child: bool = False  # heavy or GPU work runs in a child process per run
    weight: float = 1.0  # share of the card's percent bar
    after_budget: bool = False  # still runs when the budget stopped the run (finalizers)


def no_data_source(spec: dict[str, Any]) -> str | None:
    return None


def no_summary(run_dir: Path) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Kind:
    name: str
    stages: tuple[StageDef, ...]
    plan: Planner
    # What the card's `data` line shows for a spec of this kind (None: nothing yet).
    data_source: Callable[[dict[str, Any]], str | None] = no_data_source
    # Fields this kind adds to summary.json, read from its finished run directory.
    summary: Callable[[Path], dict[str, Any]] = no_summary

    def stage(self, name: str) -> StageDef:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"the {self.name} kind has no stage {name!r}")
