"""What each kind of run does: its stages, in order (SPEC §3.2). A new kind is a list of stages.

Light on purpose (no heavy imports): the API reads it to tell which kinds are built yet.
Each stage is a plain function `(context, spec) -> dict`, named here by "module:function".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageDef:
    name: str
    ref: str | None  # None: not built yet (the API answers 501 for the kind)
    in_child: bool = False  # heavy or GPU work runs in a child process per run
    weight: float = 1.0  # share of the card's percent bar
    after_budget: bool = False  # still runs when the budget stopped the run (finalizers)


KINDS: dict[str, tuple[StageDef, ...]] = {
    "train": (
        StageDef("prepare_corpus", "worker.stages.train:prepare_corpus"),
        StageDef("prepare_config", "worker.stages.train:prepare_config", weight=0.2),
        StageDef("launch_trainer", "worker.train.stage:launch_trainer", in_child=True, weight=8),
        StageDef("evaluate", "worker.evaluate.stage:evaluate", in_child=True, weight=2),
    ),
    "bench": (
        StageDef("resolve", "worker.evaluate.bench:resolve"),
        StageDef("evaluate", "worker.evaluate.bench:evaluate", in_child=True, weight=8),
    ),
    "hillclimb": (
        StageDef("plan", "worker.hillclimb.stages:plan"),
        # The coordinator: one child `train` run per candidate, on any worker.
        StageDef("search", "worker.hillclimb.stages:search", weight=20),
        StageDef("finalize", "worker.hillclimb.stages:finalize", after_budget=True),
    ),
    "selftest": (
        StageDef("prepare", "worker.stages.selftest:prepare"),
        StageDef("loop", "worker.stages.selftest:loop", in_child=True, weight=8),
    ),
}

# Dry runs resolve and validate without training (SPEC §3.2): "module:function" per kind.
PLANNERS: dict[str, str] = {
    "train": "worker.stages.dryrun:plan_train",
    "bench": "worker.evaluate.bench:plan",
    "hillclimb": "worker.hillclimb.stages:plan_dry",
    "selftest": "worker.stages.dryrun:plan_generic",
}


def missing_stages(kind: str, dry_run: bool) -> list[str]:
    """Stages a run of this kind would need that are not built yet (empty: it can run)."""
    if dry_run:
        return [] if kind in PLANNERS else [s.name for s in KINDS[kind]]
    return [s.name for s in KINDS[kind] if s.ref is None]
