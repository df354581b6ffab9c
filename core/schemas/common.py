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
# A controller's name (`trm promote RUN --as NAME`, a hill-climb's `promote_best`, a
# `decision_log` source).
CONTROLLER_NAME = r"^[a-z0-9][a-z0-9_-]{0,63}$"
CONTROLLER_NAME_RULE = (
    "1-64 characters: lowercase letters, digits, '-' and '_', starting with a letter or digit"
)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromotionTerms(StrictModel):
    """What a promotion says beside the run it promotes, the same from `POST /controllers` and
    from a hill-climb's `promote_best`: the name, the abstain margin and decision logging."""

    name: str = Field(
        pattern=CONTROLLER_NAME,
        max_length=64,
        description=f"the controller's name: {CONTROLLER_NAME_RULE}",
    )
    abstain_margin: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="a decision whose best score leads the next by less than this abstains",
    )
    log_decisions: bool | None = Field(
        default=None,
        description="record every decided row under a decision id (default: as the name was; "
        "off for a new name)",
    )


class Budget(StrictModel):
    """Checked at step and candidate boundaries (SPEC §3.2a): a run may overshoot by one step."""

    max_seconds: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        description="Wall-clock seconds the run may work before it stops as `budget` (null: the "
        "server's TRM_MAX_SECONDS bounds the work it asks for at submit instead).",
    )
    max_tokens: int | None = Field(
        default=None,
        gt=0,
        le=10**15,
        description="Training tokens (the trainer's running `tokens_trained`) after which the run "
        "stops as `budget`; null: no token limit.",
    )
    max_candidates: int | None = Field(
        default=None,
        gt=0,
        le=MAX_COUNT,
        description="Candidates a search may try before it stops as `budget`; null: no limit "
        "beyond its own rules.",
    )


class Notify(StrictModel):
    url: str = Field(
        max_length=2000,
        description="Where the run's terminal status is POSTed, signed with TRM_NOTIFY_SECRET; its "
        "host must be on the server's TRM_NOTIFY_ALLOW.",
    )


class CommonSpec(StrictModel):
    name: str | None = Field(
        default=None,
        max_length=200,
        description="A label for the run, shown with it in listings; it changes nothing the run "
        "does.",
    )
    dry_run: bool = Field(
        default=False,
        description="Validate and plan only: every stage is marked `planned` with what it would "
        "do, nothing is trained, and the run is queued on the cpu queue.",
    )
    probe: bool = Field(
        default=False,
        description="A smoke run that checks the spec end to end: the trainer runs one batch (trm, "
        "qlora) or 8 rows and 2 trees (gbdt), and evaluation scores a row or two.",
    )
    budget: Budget = Field(
        default_factory=Budget,
        description="Limits on the run's work, checked at step and candidate boundaries.",
    )
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=10,
        description="Attempts the run gets before an interrupted run is failed instead of "
        "re-queued; null: the server's TRM_MAX_ATTEMPTS.",
    )
    notify: Notify | None = Field(
        default=None,
        description="A webhook told of the run's terminal status; null: none.",
    )
