"""The corpus part of a `train` spec (SPEC §4). Draft: the corpus-builder issue owns and extends it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrmPlayRootSource(StrictModel):
    type: Literal["trm_play_root"]
    name: str
    path: str


class JsonlSource(StrictModel):
    type: Literal["jsonl"]
    name: str
    path: str
    mode: Literal["normalized", "reasoning_trace"] = "normalized"
    state_fields: list[str] = Field(default_factory=list)
    tools_field: str | None = None
    tools_default: list[str] | None = None
    action_field: str | None = None
    action_default: str | None = None
    meta_fields: list[str] = Field(default_factory=list)


class RouterJsonlSource(StrictModel):
    type: Literal["router_jsonl"]
    name: str
    path: str


Source = Annotated[
    TrmPlayRootSource | JsonlSource | RouterJsonlSource, Field(discriminator="type")
]


class SplitSpec(StrictModel):
    by: Literal["env", "run", "episode", "row"] | None = None
    seed: int = 0
    val_fraction: float = Field(default=0.2, ge=0.0, lt=1.0)
    anchor: list[str] = Field(default_factory=list)


class Knobs(StrictModel):
    source_mix: dict[str, float] = Field(default_factory=dict)
    heldout_breadth: int = Field(default=0, ge=0)
    state_compression: Literal["full", "keys", "minimal"] = "full"
    negative_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    recovery_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    namespace_normalization: bool = False


class CorpusSpec(StrictModel):
    sources: list[Source] = Field(min_length=1)
    split: SplitSpec = Field(default_factory=SplitSpec)
    min_exact_positives: int = Field(default=2, ge=0)
    knobs: Knobs = Field(default_factory=Knobs)
    contract: Literal["action_only", "json"] = "action_only"
    dedupe: bool = True
