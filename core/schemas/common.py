"""What every run spec shares: strictness, budgets, retries, notifications (SPEC §3.2a, §3.3)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Seeds feed torch and numpy generators, and trm's data order takes `seed * 7919 + epoch`: a
# seed near 2**63 overflowed there at run time. 31 bits are more seeds than anyone will try.
Seed = Annotated[int, Field(ge=0, le=2**31 - 1)]
# The upper bound of every count a spec may ask for that has no tighter one. Step counts and
# candidates (`max_steps`, selftest `steps`, `max_candidates`) are bounded by the server's
# TRM_MAX_STEPS / TRM_MAX_CANDIDATES instead, which an operator may raise (core/runs.py).
MAX_COUNT = 10_000_000
STEPS_LIMIT = "at most the server's TRM_MAX_STEPS (checked at submit)"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Budget(StrictModel):
    """Checked at step and candidate boundaries (SPEC §3.2a): a run may overshoot by one step."""

    max_seconds: float | None = Field(default=None, gt=0, le=1e9)
    max_tokens: int | None = Field(default=None, gt=0, le=10**15)
    max_candidates: int | None = Field(default=None, gt=0, le=MAX_COUNT)


class Notify(StrictModel):
    url: str = Field(max_length=2000)


class CommonSpec(StrictModel):
    name: str | None = Field(default=None, max_length=200)
    dry_run: bool = False
    probe: bool = False
    budget: Budget = Field(default_factory=Budget)
    max_attempts: int | None = Field(default=None, ge=1, le=10)
    notify: Notify | None = None
