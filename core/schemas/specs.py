"""Run specs (SPEC §3.3): one model per kind, discriminated by `kind`, unknown keys rejected.

JSON Schemas for these live in `specs/schemas/` (`trm schemas` regenerates them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from core.schemas.bench import BenchSpec
from core.schemas.common import MAX_COUNT, STEPS_LIMIT, CommonSpec
from core.schemas.hillclimb import HillclimbSpec
from core.schemas.train import TrainSpec


class SelftestSpec(CommonSpec):
    """Checks a worker end to end: a CPU loop in a child process that checkpoints and resumes."""

    kind: Literal["selftest"] = Field(description="The run kind: `selftest`.")
    steps: int = Field(default=20, ge=1, description=STEPS_LIMIT)
    step_seconds: float = Field(
        default=0.05,
        ge=0,
        le=60,
        description="CPU seconds each step burns; steps x step_seconds is the work checked "
        "against TRM_MAX_SECONDS.",
    )
    checkpoint_every: int = Field(
        default=1,
        ge=1,
        le=MAX_COUNT,
        description="Steps between checkpoints (one is also written on a stop and at the end); "
        "a resumed run starts from the newest.",
    )
    fail_at_step: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Raise an error after this step, to exercise a failing run; null: never.",
    )
    stall_at_step: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Hang (no progress, no exit) after this step: exercises stall detection "
        "(TRM_STALL_S); null: never.",
    )
    queue: Literal["gpu", "cpu"] = Field(
        default="cpu", description="The worker queue the run is sent to."
    )


RunSpec = Annotated[
    TrainSpec | BenchSpec | HillclimbSpec | SelftestSpec, Field(discriminator="kind")
]
RUN_SPEC: TypeAdapter[Any] = TypeAdapter(RunSpec)
SPEC_MODELS: dict[str, type[CommonSpec]] = {
    "train": TrainSpec,
    "bench": BenchSpec,
    "hillclimb": HillclimbSpec,
    "selftest": SelftestSpec,
}
DEFAULT_QUEUE = {"train": "gpu", "bench": "gpu", "hillclimb": "cpu"}


def queue_for(spec: CommonSpec) -> str:
    if isinstance(spec, SelftestSpec):
        return spec.queue
    return DEFAULT_QUEUE[spec.kind]  # type: ignore[attr-defined]


def step_limits(spec: CommonSpec) -> list[tuple[str, int | None]]:
    """(field path, requested count) pairs checked against the settings' limits."""
    if isinstance(spec, TrainSpec):
        return [
            ("trm.max_steps", spec.trm.max_steps),
            ("qlora.max_steps", spec.qlora.max_steps),
            ("trm_grid.max_steps", spec.trm_grid.max_steps),
        ]
    if isinstance(spec, SelftestSpec):
        return [("steps", spec.steps)]
    return []


def work_seconds(spec: CommonSpec) -> tuple[str, float, str] | None:
    """(field to lower, seconds, how they were counted) for a spec whose work the API can know
    before it runs, checked against TRM_MAX_SECONDS: a step count bounds steps, not work (a
    selftest of 1,000,000 steps x 60 s would hold its slot for 694 days). None: not known here
    (a trainer's work is estimated on the worker once the corpus is known)."""
    if isinstance(spec, SelftestSpec):
        how = f"steps={spec.steps} x step_seconds={spec.step_seconds:g}"
        return "steps", spec.steps * spec.step_seconds, how
    return None
