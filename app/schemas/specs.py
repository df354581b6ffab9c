"""Run specs (SPEC §3.3): one model per kind, discriminated by `kind`, unknown keys rejected.

JSON Schemas for these live in `specs/schemas/` (`trm schemas` regenerates them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from app.schemas.bench import BenchSpec
from app.schemas.common import CommonSpec, StrictModel
from app.schemas.corpus import CorpusSpec
from app.schemas.hillclimb import HillclimbSpec


class TrmTrainerConfig(StrictModel):
    """The tiny recursive model (worker/train/trm.py). The run's `seed` drives it."""

    n_recursions: int = Field(default=4, ge=1, le=64)
    hidden: int = Field(default=64, ge=8, le=4096)
    epochs: int = Field(default=8, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    batch_size: int = Field(default=32, ge=1, le=4096)
    grad_accum: int = Field(default=1, ge=1, le=1024)
    lr: float = Field(default=3e-3, gt=0, lt=1)
    checkpoint_every: int = Field(default=100, ge=1)


class QloraTrainerConfig(StrictModel):
    base_model: str = "smollm2-135m-instruct"
    r: int = Field(default=16, ge=1, le=512)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] | Literal["all-linear"] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    lr: float = Field(default=2e-4, gt=0, lt=1)
    micro_batch: int = Field(default=8, ge=1, le=1024)
    grad_accum: int = Field(default=2, ge=1, le=1024)
    max_seq_len: int = Field(default=512, ge=16, le=32768)  # a route row renders to ~390 tokens
    epochs: int = Field(default=1, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    eval_every: int = Field(default=50, ge=1)
    checkpoint_every: int = Field(default=50, ge=1)
    packing: bool = True
    seed: int = 0


class TrainSpec(CommonSpec):
    kind: Literal["train"]
    trainer: Literal["trm", "qlora"] = "trm"
    corpus: CorpusSpec
    trm: TrmTrainerConfig = Field(default_factory=TrmTrainerConfig)
    qlora: QloraTrainerConfig = Field(default_factory=QloraTrainerConfig)
    seed: int = 0


class SelftestSpec(CommonSpec):
    """Checks a worker end to end: a CPU loop in a child process that checkpoints and resumes."""

    kind: Literal["selftest"]
    steps: int = Field(default=20, ge=1)
    step_seconds: float = Field(default=0.05, ge=0, le=60)
    checkpoint_every: int = Field(default=1, ge=1)
    fail_at_step: int | None = Field(default=None, ge=1)
    # Hang (no progress, no exit) after this step: exercises stall detection (TRM_STALL_S).
    stall_at_step: int | None = Field(default=None, ge=1)
    queue: Literal["gpu", "cpu"] = "cpu"


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
        return [("trm.max_steps", spec.trm.max_steps), ("qlora.max_steps", spec.qlora.max_steps)]
    if isinstance(spec, SelftestSpec):
        return [("steps", spec.steps)]
    return []
