"""The `bench` run spec (SPEC §7). Owned by the evaluation issue."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.common import CommonSpec


class BenchSpec(CommonSpec):
    kind: Literal["bench"]
    bench: str = Field(min_length=1, max_length=100)
    baseline: str = "none"
    router: str = "none"
    repeats: int = Field(default=1, ge=1, le=100)
