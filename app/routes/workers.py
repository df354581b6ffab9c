"""/workers: the worker registry (SPEC §11), from the `workers` table each worker keeps fresh."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from sqlmodel import Session, col, select

from app.deps import AppState, session, state
from core.db import as_utc
from core.models import Run, WorkerRecord, utcnow

router = APIRouter(tags=["workers"])


class WorkerOut(BaseModel):
    id: str
    host: str
    pid: int
    queues: list[str]
    # None on a machine without a GPU (or before the worker reported one).
    gpu_name: str | None
    gpu_memory_bytes: int | None
    current_run_id: str | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    heartbeat_age_s: float | None
    alive: bool


class WorkerList(BaseModel):
    workers: list[WorkerOut]
    alive: int
    stale_after_s: float


def worker_out(
    record: WorkerRecord, now: datetime, stale_after_s: float, running: dict[str, str | None]
) -> WorkerOut:
    beat = as_utc(record.heartbeat_at)
    age = (now - beat).total_seconds() if beat else None
    alive = age is not None and age <= stale_after_s
    return WorkerOut(
        id=record.id,
        host=record.host,
        pid=record.pid,
        queues=list(record.queues or []),
        gpu_name=getattr(record, "gpu_name", None),
        gpu_memory_bytes=getattr(record, "gpu_memory_bytes", None),
        # The registry row keeps the last run it beat for; it is current only while that run is
        # still running on this worker (a finished or re-queued run has moved on).
        current_run_id=record.current_run_id
        if running.get(record.current_run_id or "") == record.id
        else None,
        started_at=as_utc(record.started_at),
        heartbeat_at=beat,
        heartbeat_age_s=round(age, 3) if age is not None else None,
        alive=alive,
    )


@router.get("/workers", response_model=WorkerList, summary="List workers")
def list_workers(
    app: Annotated[AppState, Depends(state)], db: Annotated[Session, Depends(session)]
) -> WorkerList:
    """Every registered worker, newest heartbeat first: its queues, GPU name and memory, the
    run it works on; `alive` counts those whose heartbeat is fresh (`TRM_STALE_AFTER_S`)."""
    now = utcnow()
    stale = app.settings.stale_after_s
    rows = db.exec(select(WorkerRecord).order_by(col(WorkerRecord.heartbeat_at).desc())).all()
    claimed = [r.current_run_id for r in rows if r.current_run_id]
    running = dict(
        db.exec(
            select(Run.id, Run.worker_id).where(
                col(Run.id).in_(claimed), col(Run.status) == "running"
            )
        ).all()
        if claimed
        else []
    )
    workers = [worker_out(r, now, stale, running) for r in rows]
    return WorkerList(workers=workers, alive=sum(w.alive for w in workers), stale_after_s=stale)
