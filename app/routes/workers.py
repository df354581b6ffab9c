"""/workers: the worker registry (SPEC §11), from the `workers` table each worker keeps fresh."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from sqlmodel import Session, col, select

from app.db import as_utc
from app.deps import AppState, session, state
from app.models import WorkerRecord, utcnow

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


def worker_out(record: WorkerRecord, now: datetime, stale_after_s: float) -> WorkerOut:
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
        # A dead worker's last run is not its current one: the reconciler has moved it on.
        current_run_id=record.current_run_id if alive else None,
        started_at=as_utc(record.started_at),
        heartbeat_at=beat,
        heartbeat_age_s=round(age, 3) if age is not None else None,
        alive=alive,
    )


@router.get("/workers", response_model=WorkerList)
def list_workers(
    app: Annotated[AppState, Depends(state)], db: Annotated[Session, Depends(session)]
) -> WorkerList:
    """Every registered worker, newest heartbeat first; `alive` counts the fresh ones."""
    now = utcnow()
    stale = app.settings.stale_after_s
    rows = db.exec(select(WorkerRecord).order_by(col(WorkerRecord.heartbeat_at).desc())).all()
    workers = [worker_out(r, now, stale) for r in rows]
    return WorkerList(
        workers=workers, alive=sum(w.alive for w in workers), stale_after_s=stale
    )


def alive_after(stale_after_s: float) -> datetime:
    return utcnow() - timedelta(seconds=stale_after_s)
