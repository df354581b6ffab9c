"""The `hillclimb` run spec (SPEC §8). Owned by the hill-climb issue."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.schemas.common import CommonSpec, StrictModel
from app.schemas.corpus import Knobs


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
