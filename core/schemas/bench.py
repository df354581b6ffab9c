"""The `bench` run spec (SPEC §7).

`baseline` and `router` each name `none`, a train run id, `<hill-climb run id>:root|final`, or an
artifact path under the runs or data directory (core/benches/resolve.py); `router` may also be
`train`: the bench run first trains a trm controller on the bench's own train worlds, sized by
`router_train`, and benches that. Unset fields take the bench's `defaults` from
`specs/benches/<bench>.json`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.schemas.common import MAX_COUNT, CommonSpec, Seed
from core.schemas.train import TrmTrainerConfig


class BenchSpec(CommonSpec):
    kind: Literal["bench"] = Field(description="The run kind: `bench`.")
    bench: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The bench's name: its file specs/benches/<bench>.json.",
    )
    baseline: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        description="The side compared against: `none`, a train run id, "
        "`<hill-climb run id>:root|final`, or an artifact path; null: the bench's default.",
    )
    router: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        description="The side benched: as `baseline`, or `train` (a trm router trained in this "
        "run on the bench's train worlds); null: the bench's default.",
    )
    repeats: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Times both sides are scored on the same anchors; null: the bench's default.",
    )
    trainer: Literal["trm", "qlora"] | None = Field(
        default=None,
        description="What `none` means on a side: an untrained trm (trm) or the bare base model "
        "(qlora); null: the bench's default.",
    )
    episodes: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Rollouts per anchor world, for the failure and recovery rates; null: the "
        "bench's default.",
    )
    train_sample: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Train rows scored per side for train_score and the generalization gap (a "
        "qlora side scores about a row a second on a CPU); null: the bench's default.",
    )
    results_jsonl: str | None = Field(
        default=None,
        max_length=4096,
        description="A local JSONL export of a verifiers environment's results (normalized "
        "rows), under DATA_DIR.",
    )
    data: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="An external bench's data folder under DATA_DIR; null: the bench's `data`.",
    )
    instances: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="An external bench's instances per anchor set, where it rolls out (jobshop); "
        "null: the bench's `instances`.",
    )
    router_train: TrmTrainerConfig | None = Field(
        default=None,
        description="With `router: train`, the trm config of the router trained in this run; "
        "null: the bench's `router_train`, else the trm defaults.",
    )
    seed: Seed = Field(
        default=0,
        description="Drives the train rows sampled and the rollouts (repeat r uses seed + r).",
    )
