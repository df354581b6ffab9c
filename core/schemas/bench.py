"""The `bench` run spec (SPEC §7). Owned by the evaluation issue.

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
    kind: Literal["bench"]
    bench: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    baseline: str | None = Field(default=None, min_length=1, max_length=500)
    router: str | None = Field(default=None, min_length=1, max_length=500)
    repeats: int | None = Field(default=None, ge=1, le=100)
    # `none` means an untrained trm (trm) or the bare base model (qlora).
    trainer: Literal["trm", "qlora"] | None = None
    episodes: int | None = Field(default=None, ge=1, le=1000)
    # Train rows scored per side for train_score and the generalization gap (a qlora side scores
    # about a row a second on a CPU).
    train_sample: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    # A local JSONL export of a verifiers environment's results (normalized rows), under DATA_DIR.
    results_jsonl: str | None = Field(default=None, max_length=4096)
    # An external bench's data folder under DATA_DIR (its default: the bench's `data`).
    data: str | None = Field(default=None, min_length=1, max_length=4096)
    # An external bench's instances per anchor set, where it rolls out (jobshop; its default:
    # the bench's `instances`).
    instances: int | None = Field(default=None, ge=1, le=1000)
    # `router: train`: the trm config of the router trained in this run (default: the bench's
    # `router_train`, else the trm defaults).
    router_train: TrmTrainerConfig | None = None
    seed: Seed = 0
