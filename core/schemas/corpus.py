"""The corpus part of a `train` spec (SPEC §4): which logs to read (each source's model lives in
core/schemas/sources.py), how to split them, the knobs.

Paths are strings here; the CLI resolves relative ones against the spec file, the API accepts only
paths under `DATA_DIR`. The builder itself lives in `worker/corpus/` (this module stays light: the
API process imports it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.schemas.common import MAX_COUNT, Seed
from core.schemas.sources import MAX_MAP, MAX_NAMES, MAX_SOURCES, Source, StrictModel


class SplitSpec(StrictModel):
    by: Literal["env", "run", "episode", "row"] | None = Field(
        default=None,
        description="The groups kept whole on one side of the train/val split; null: `env` when "
        "the rows span 3+ envs, else `run` when 3+ runs, else `episode`.",
    )
    seed: Seed = Field(
        default=0, description="Seeds which groups go to val, and every knob's sampling."
    )
    val_fraction: float = Field(
        default=0.2,
        ge=0.0,
        lt=1.0,
        description="Share of the groups that go to val (unless `knobs.heldout_breadth` is set).",
    )
    anchor: list[str] = Field(
        default_factory=list,
        max_length=MAX_MAP,
        description="Held out entirely, never trained on, and scored as anchors: env names or "
        "group keys (`env/run`, `env/run/episode`) at the split level or coarser.",
    )


class Knobs(StrictModel):
    """The data knobs the hill-climb turns (SPEC §4, §8). Each is deterministic in `split.seed`."""

    source_mix: dict[str, float] = Field(
        default_factory=dict,
        max_length=MAX_SOURCES,
        description="Weight per source name for the train split (every source named; 0 leaves "
        "it out); empty: the rows as read.",
    )
    heldout_breadth: int = Field(
        default=0,
        ge=0,
        le=MAX_COUNT,
        description="How many groups leave training (go to val); 0: use `split.val_fraction`.",
    )
    state_compression: Literal["full", "keys", "minimal"] = Field(
        default="full",
        description="How much of the state a row keeps: `full` as logged; `keys`, the top-level "
        "`state_keys`; `minimal`, those flattened to dotted leaves, ids dropped and floats "
        "rounded to 2 digits.",
    )
    state_keys: list[str] = Field(
        default_factory=list,
        max_length=MAX_NAMES,
        description="Top-level state keys that survive `keys`/`minimal`; empty: all but the "
        "trace extras.",
    )
    negative_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1000.0,
        description="Negatives in critic.jsonl from train groups, as a share of the train rows; "
        "null keeps all.",
    )
    recovery_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Share of recovery rows in train (reached by downsampling); null keeps the "
        "natural share.",
    )
    namespace_normalization: bool | Literal["auto"] = Field(
        default=False,
        description="true: action ids become shared tags from `namespace_map`, else the id "
        "without its env prefix and namespace; `auto`: each world's own `action_tags` (e.g. "
        "`use-trm` -> `route:TRM_ONLY`), ids a world does not tag stay as they are. The raw "
        "ids stay in each row's meta.",
    )
    namespace_map: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_MAP,
        description="Explicit raw id -> shared tag; it wins over a world's own tags.",
    )

    @model_validator(mode="after")
    def _weights_not_negative(self) -> Knobs:
        bad = sorted(name for name, weight in self.source_mix.items() if weight < 0)
        if bad:
            raise ValueError(f"source_mix weights must be >= 0 (negative: {', '.join(bad)})")
        if self.source_mix and not any(self.source_mix.values()):
            raise ValueError("source_mix leaves every source out (all weights are 0)")
        return self


class CorpusSpec(StrictModel):
    sources: list[Source] = Field(
        min_length=1,
        max_length=MAX_SOURCES,
        description="The logs read, each by its `type`; their rows are pooled.",
    )
    split: SplitSpec = Field(
        default_factory=SplitSpec, description="How the rows divide into train, val and anchors."
    )
    min_exact_positives: int = Field(
        default=2,
        ge=0,
        le=MAX_COUNT,
        description="A family with fewer positive rows than this leaves the action corpus (to "
        "critic.jsonl).",
    )
    knobs: Knobs = Field(default_factory=Knobs, description="The data knobs the hill-climb turns.")
    contract: Literal["action_only", "json"] = Field(
        default="action_only",
        description="What the assistant says in messages.jsonl: the action id alone, or the "
        "router JSON object.",
    )
    dedupe: bool = Field(
        default=True,
        description="Drop a row whose state, tools and action repeat an earlier one's (counted "
        "as duplicates).",
    )

    @model_validator(mode="after")
    def _names_line_up(self) -> CorpusSpec:
        names = [source.name for source in self.sources]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"source names must be unique (repeated: {', '.join(repeated)})")
        mix = self.knobs.source_mix
        if mix:
            unknown = sorted(set(mix) - set(names))
            missing = [name for name in names if name not in mix]
            if unknown:
                raise ValueError(f"knobs.source_mix names unknown sources: {', '.join(unknown)}")
            if missing:
                raise ValueError(
                    f"knobs.source_mix must weigh every source (missing: {', '.join(missing)})"
                )
        return self
