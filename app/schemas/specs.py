"""Run specs (SPEC §3.3): one model per kind, discriminated by `kind`, unknown keys rejected.

JSON Schemas for these live in `specs/schemas/` (`trm schemas` regenerates them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from app.schemas.corpus import CorpusSpec, Knobs


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Budget(StrictModel):
    """Checked at step and candidate boundaries (SPEC §3.2a): a run may overshoot by one step."""

    max_seconds: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_candidates: int | None = Field(default=None, gt=0)


class Notify(StrictModel):
    url: str


class CommonSpec(StrictModel):
    name: str | None = Field(default=None, max_length=200)
    dry_run: bool = False
    probe: bool = False
    budget: Budget = Field(default_factory=Budget)
    max_attempts: int | None = Field(default=None, ge=1, le=10)
    notify: Notify | None = None


class TrmTrainerConfig(StrictModel):
    n_recursions: int = Field(default=4, ge=1, le=64)
    hidden: int = Field(default=64, ge=8, le=4096)
    epochs: int = Field(default=8, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    batch_size: int = Field(default=32, ge=1, le=4096)
    lr: float = Field(default=3e-3, gt=0, lt=1)
    seed: int = 0


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
    max_seq_len: int = Field(default=256, ge=16, le=32768)
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


class BenchSpec(CommonSpec):
    kind: Literal["bench"]
    bench: str = Field(min_length=1, max_length=100)
    baseline: str = "none"
    router: str = "none"
    repeats: int = Field(default=1, ge=1, le=100)


class KnobRanges(StrictModel):
    source_mix: list[dict[str, float]] = Field(default_factory=list)
    heldout_breadth: list[int] = Field(default_factory=list)
    state_compression: list[Literal["full", "keys", "minimal"]] = Field(default_factory=list)
    negative_rate: list[float] = Field(default_factory=list)
    recovery_rate: list[float] = Field(default_factory=list)
    namespace_normalization: list[bool] = Field(default_factory=list)


class HillclimbSpec(CommonSpec):
    kind: Literal["hillclimb"]
    base: dict[str, Any]
    anchors: list[str] = Field(default_factory=list)
    start_rung: int = Field(default=0, ge=0, le=5)
    knobs: KnobRanges = Field(default_factory=KnobRanges)
    start_knobs: Knobs = Field(default_factory=Knobs)
    patience: int = Field(default=3, ge=1)
    max_candidates: int = Field(default=12, ge=1)
    parallelism: int = Field(default=1, ge=1, le=64)
    noise_margin: float = Field(default=0.01, ge=0, le=1)
    max_generalization_gap: float = Field(default=0.15, ge=0, le=1)
    seed: int = 0


class SelftestSpec(CommonSpec):
    """Checks a worker end to end: a CPU loop in a child process that checkpoints and resumes."""

    kind: Literal["selftest"]
    steps: int = Field(default=20, ge=1)
    step_seconds: float = Field(default=0.05, ge=0, le=60)
    checkpoint_every: int = Field(default=1, ge=1)
    fail_at_step: int | None = Field(default=None, ge=1)
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
