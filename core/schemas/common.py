"""What every run spec shares: strictness, budgets, retries, notifications (SPEC §3.2a, §3.3)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
