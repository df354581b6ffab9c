"""Tables (SPEC §3, §8, §9): the database is the source of truth for run state.

The schema only changes through alembic (`migrations/`); these classes describe it for the ORM.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
RUN_STATUSES = ("queued", "running", "completed", "failed", "cancelled", "interrupted")
FAILURE_CLASSES = ("bad_input", "oom", "crash", "timeout", "stalled", "dependency", "internal")

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, so ids sort by creation time."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def utcnow() -> datetime:
    return datetime.now(UTC)


def _json_column(**kw: Any) -> Any:
    return Field(default=None, sa_column=sa.Column(sa.JSON, **kw))


def _time_column(nullable: bool = True, index: bool = False) -> Any:
    return Field(
        default=None,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=nullable, index=index),
    )


class Run(SQLModel, table=True):
    __tablename__ = "runs"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    kind: str = Field(index=True, max_length=32)
    status: str = Field(default="queued", index=True, max_length=16)
    queue: str = Field(default="gpu", max_length=16)
    name: str | None = Field(default=None, max_length=200)
    parent_id: str | None = Field(default=None, index=True, max_length=26)
    spec: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    spec_hash: str = Field(max_length=64)
    idempotency_key: str | None = Field(default=None, unique=True, max_length=200)
    dry_run: bool = False

    attempt: int = 1
    max_attempts: int = 3
    attempts: list[dict[str, Any]] | None = _json_column()
    worker_id: str | None = Field(default=None, max_length=200)
    # Fencing token: bumped on every claim; a worker whose token is stale must stop writing.
    lease_token: int = 0
    # The lease holder's upload credential (app/routes/uploads.py): a random key replaced on every
    # claim, so only the worker running this attempt can upload. No API answer carries it.
    upload_key: str | None = Field(default=None, max_length=64)
    heartbeat_at: datetime | None = _time_column()
    cancel_requested: bool = False

    failure_class: str | None = Field(default=None, max_length=16)
    failure_reason: str | None = None
    stopped_by: str | None = Field(default=None, max_length=16)

    phase: str | None = Field(default=None, max_length=64)
    percent: float = 0.0
    best_anchor: float | None = None
    card: dict[str, Any] | None = _json_column()
    usage: dict[str, Any] | None = _json_column()
    event_seq: int = 0

    created_at: datetime = Field(
        default_factory=utcnow,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True),
    )
    started_at: datetime | None = _time_column()
    finished_at: datetime | None = _time_column()

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Stage(SQLModel, table=True):
    __tablename__ = "stages"
    __table_args__ = (sa.UniqueConstraint("run_id", "name"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=26)
    name: str = Field(max_length=64)
    position: int = 0
    status: str = Field(default="planned", max_length=16)
    attempt: int = 1
    started_at: datetime | None = _time_column()
    completed_at: datetime | None = _time_column()
    manifest: dict[str, Any] | None = _json_column()


class Event(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (sa.UniqueConstraint("run_id", "seq"),)

    # Global and monotonic; per run, commit order equals id order (see core/events.py).
    id: int | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
    )
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=26)
    # Contiguous per run, so a follower can tell a gap from a quiet stream.
    seq: int
    type: str = Field(max_length=16)
    data: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class LedgerEntry(SQLModel, table=True):
    __tablename__ = "ledger_entries"
    __table_args__ = (sa.UniqueConstraint("search_id", "candidate_id", "event"),)

    id: int | None = Field(default=None, primary_key=True)
    seq: int
    search_id: str = Field(foreign_key="runs.id", index=True, max_length=26)
    candidate_id: str = Field(max_length=64)
    event: str = Field(max_length=32)
    parent_id: str | None = Field(default=None, max_length=64)
    run_id: str | None = Field(default=None, max_length=26)
    rung: int = 0
    knobs: dict[str, Any] | None = _json_column()
    knob_diff: dict[str, Any] | None = _json_column()
    corpus_hash: str | None = Field(default=None, max_length=64)
    seed: int | None = None
    status: str = Field(max_length=16)
    train_score: float | None = None
    anchor_score: float | None = None
    failure_rate: float | None = None
    recovery_rate: float | None = None
    generalization_gap: float | None = None
    # The untrained model's anchor score on the candidate's own corpus, and whether the
    # candidate scored no better than it (then it is never the best).
    untrained_score: float | None = None
    untrained_like: bool | None = None
    # The run whose result a candidate with the same corpus and trainer config reused.
    reused_from: str | None = Field(default=None, max_length=26)
    decision: str | None = Field(default=None, max_length=16)
    reason: str | None = None
    started_at: datetime | None = _time_column()
    finished_at: datetime | None = _time_column()


class WorkerRecord(SQLModel, table=True):
    __tablename__ = "workers"

    id: str = Field(primary_key=True, max_length=200)
    host: str = Field(max_length=200)
    pid: int
    queues: list[str] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    current_run_id: str | None = Field(default=None, max_length=26)
    # From nvidia-smi at startup (worker/gpuinfo.py); None on a CPU worker.
    gpu_name: str | None = Field(default=None, max_length=200)
    gpu_memory_bytes: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, nullable=True)
    )
    started_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    heartbeat_at: datetime = Field(
        default_factory=utcnow,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True),
    )


class ControllerVersion(SQLModel, table=True):
    """One promoted version of a named controller (SPEC §12): a completed train run's trainer
    folder and the scorecard figures it was promoted on. Never changed once written."""

    __tablename__ = "controller_versions"
    __table_args__ = (sa.UniqueConstraint("name", "version"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, max_length=64)
    version: int
    # The train run whose `trainer/` folder decides; `source_run_id` is what was promoted (the
    # same run, or the hill-climb whose best candidate it is).
    run_id: str = Field(max_length=26)
    source_run_id: str = Field(max_length=26)
    candidate_id: str | None = Field(default=None, max_length=64)
    trainer: str = Field(max_length=16)
    # Relative to RUNS_DIR (`<run_id>/trainer`), so every host that shares RUNS_DIR finds it.
    trainer_dir: str = Field(max_length=300)
    features_format: str | None = Field(default=None, max_length=64)
    anchor_score: float | None = None
    scores: dict[str, Any] | None = _json_column()
    anchors: str | None = None
    abstain_margin: float | None = None
    promoted_by: str = Field(max_length=200)
    promoted_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class Controller(SQLModel, table=True):
    """A controller name and the version that answers for it now: a promotion moves it to the
    new version, a rollback to an older one."""

    __tablename__ = "controllers"

    name: str = Field(primary_key=True, max_length=64)
    live_version: int
    # Opt-in: record every row it decides in `decisions` (with an id the caller reports the
    # outcome under).
    log_decisions: bool = Field(default=False, sa_column_kwargs={"server_default": sa.false()})
    # A candidate version that also scores every call for the live one, never changing the answer.
    shadow_version: int | None = None
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class DecisionRecord(SQLModel, table=True):
    """One row a controller decided (SPEC §12), logged when its controller opts in or a shadow
    version runs beside the live one; the caller's outcome for it, once reported. Bounded: a row
    is as large as the decide limits allow, and the decision process keeps at most
    TRM_DECISION_LOG_KEEP per controller (core/decisions.py)."""

    __tablename__ = "decisions"
    __table_args__ = (sa.Index("ix_decisions_name_id", "name", "id"),)

    # A ULID: sorts by decision time, and pages the log.
    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    name: str = Field(max_length=64)
    version: int
    state: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    tools: list[str] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    action: str | None = Field(default=None, max_length=256)
    scores: list[float] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    margin: float
    abstain: bool
    shadow_version: int | None = None
    shadow_action: str | None = Field(default=None, max_length=256)
    decided_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    success: bool | None = None
    reward: float | None = None
    notes: str | None = Field(default=None, max_length=500)
    outcome_at: datetime | None = _time_column()
