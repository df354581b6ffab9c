"""Response models for runs, stages, events and the uniform error body."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from core.db import as_utc
from core.models import LedgerEntry, Run, Stage


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorOut(BaseModel):
    error: ErrorDetail


class StageOut(BaseModel):
    name: str
    position: int
    status: str
    attempt: int
    started_at: datetime | None
    completed_at: datetime | None
    manifest: dict[str, Any] | None

    @classmethod
    def of(cls, stage: Stage) -> StageOut:
        return cls(
            name=stage.name,
            position=stage.position,
            status=stage.status,
            attempt=stage.attempt,
            started_at=as_utc(stage.started_at),
            completed_at=as_utc(stage.completed_at),
            manifest=stage.manifest,
        )


class RunOut(BaseModel):
    id: str
    kind: str
    status: str
    name: str | None
    parent_id: str | None
    queue: str
    dry_run: bool
    attempt: int
    max_attempts: int
    attempts: list[dict[str, Any]]
    worker_id: str | None
    cancel_requested: bool
    failure_class: str | None
    failure_reason: str | None
    stopped_by: str | None
    phase: str | None
    percent: float
    best_anchor: float | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    usage: dict[str, Any] | None
    spec: dict[str, Any] | None = None
    card: dict[str, Any] | None = None
    stages: list[StageOut] | None = None
    links: dict[str, str]

    @classmethod
    def of(cls, run: Run, *, full: bool = False, stages: list[Stage] | None = None) -> RunOut:
        base = f"/runs/{run.id}"
        return cls(
            id=run.id,
            kind=run.kind,
            status=run.status,
            name=run.name,
            parent_id=run.parent_id,
            queue=run.queue,
            dry_run=run.dry_run,
            attempt=run.attempt,
            max_attempts=run.max_attempts,
            attempts=run.attempts or [],
            worker_id=run.worker_id,
            cancel_requested=run.cancel_requested,
            failure_class=run.failure_class,
            failure_reason=run.failure_reason,
            stopped_by=run.stopped_by,
            phase=run.phase,
            percent=run.percent,
            best_anchor=run.best_anchor,
            created_at=as_utc(run.created_at),
            started_at=as_utc(run.started_at),
            finished_at=as_utc(run.finished_at),
            heartbeat_at=as_utc(run.heartbeat_at),
            usage=run.usage,
            spec=run.spec if full else None,
            card=run.card if full else None,
            stages=[StageOut.of(s) for s in stages] if stages is not None else None,
            links={
                "self": base,
                "events": f"{base}/events",
                "card": f"{base}/card",
                "artifacts": f"{base}/artifacts",
                "cancel": f"{base}/cancel",
            },
        )


class RunList(BaseModel):
    runs: list[RunOut]
    next_cursor: str | None


class LedgerOut(BaseModel):
    search_id: str
    entries: list[dict[str, Any]]

    @classmethod
    def of(cls, search_id: str, rows: list[LedgerEntry]) -> LedgerOut:
        return cls(search_id=search_id, entries=[r.model_dump(mode="json") for r in rows])


class Artifact(BaseModel):
    path: str
    bytes: int


class ArtifactList(BaseModel):
    run_id: str
    artifacts: list[Artifact]
