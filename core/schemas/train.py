"""The `train` spec (SPEC §3.3, §6): a corpus and one trainer's config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.schemas.common import CommonSpec, StrictModel
from core.schemas.corpus import CorpusSpec


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
