"""/healthz (the process answers), /readyz (database, Redis, live workers, free disk), /metrics."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import psutil
import sqlalchemy as sa
from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy.engine import make_url
from sqlmodel import Session, col, func, select

from app.deps import AppState, require_token, state
from core.db import check_migrated
from core.models import RUN_STATUSES, Run, WorkerRecord, utcnow
from core.queue import QUEUES
from core.settings import Settings

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
def healthz() -> dict[str, str]:
    """`{"status": "ok"}` while the API process answers (and `instance`, the id `trm up` gave
    it); the one route that needs no token."""
    # `trm up` names its API with a fresh id, so it knows the answer is its own process and
    # not another service that already held the port.
    instance = os.environ.get("TRM_INSTANCE_ID")
    return {"status": "ok", "instance": instance} if instance else {"status": "ok"}


def _database(app: AppState) -> dict[str, Any]:
    check_migrated(app.engine)
    alive_after = utcnow() - timedelta(seconds=app.settings.stale_after_s)
    with Session(app.engine) as db:
        workers = db.exec(
            select(func.count())
            .select_from(WorkerRecord)
            .where(col(WorkerRecord.heartbeat_at) >= alive_after)
        ).one()
    return {"ok": True, "workers_alive": int(workers)}


def _free(path: Path, floor: int) -> dict[str, Any]:
    """Free bytes of the disk holding `path` (its nearest existing folder)."""
    probe = path.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError as exc:
        return {"path": str(path), "ok": False, "error": str(exc)}
    return {"path": str(path), "free_bytes": free, "ok": free >= floor}


def disk_space(settings: Settings) -> dict[str, Any]:
    """RUNS_DIR's disk and the database's: a SQLite file's folder; a server's disk is not
    visible from here, so it is reported as not measured (and does not count against ready)."""
    floor = settings.min_free_bytes
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database = _free(Path(url.database).parent, floor)
    else:
        database = {"path": None, "free_bytes": "n/a", "ok": True}
    runs_dir = _free(settings.runs_dir, floor)
    return {
        "ok": runs_dir["ok"] and database["ok"],
        "min_free_bytes": floor,
        "runs_dir": runs_dir,
        "database": database,
    }


@router.get("/readyz", dependencies=[Depends(require_token)], summary="Readiness")
async def readyz(app: Annotated[AppState, Depends(state)]) -> JSONResponse:
    """Whether the API can take runs: the database, Redis, the workers alive and the free disk
    (`checks`); 503 when the database or Redis does not answer or a disk is under
    `TRM_MIN_FREE_BYTES`."""
    checks: dict[str, Any] = {}
    try:
        db = await run_in_threadpool(_database, app)
        checks["database"] = {"ok": True}
        checks["workers"] = {"alive": db["workers_alive"]}
    except Exception as exc:
        checks["database"] = {"ok": False, "error": str(exc)}
        checks["workers"] = {"alive": None}
    try:
        assert app.pool is not None, "no Redis configured"
        await app.pool.ping()
        checks["redis"] = {"ok": True, "live_fanout": app.hub.connected}
    except Exception as exc:
        checks["redis"] = {"ok": False, "error": str(exc)}
    checks["disk"] = await run_in_threadpool(disk_space, app.settings)
    ready = checks["database"]["ok"] and checks["redis"]["ok"] and checks["disk"]["ok"]
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


def _counts(app: AppState) -> tuple[dict[str, int], int]:
    alive_after = utcnow() - timedelta(seconds=app.settings.stale_after_s)
    with Session(app.engine) as db:
        rows = db.exec(select(Run.status, func.count()).group_by(Run.status)).all()
        workers = db.exec(
            select(func.count())
            .select_from(WorkerRecord)
            .where(col(WorkerRecord.heartbeat_at) >= alive_after)
        ).one()
    return {status: int(n) for status, n in rows}, int(workers)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    dependencies=[Depends(require_token)],
    summary="Prometheus metrics",
)
async def metrics(app: Annotated[AppState, Depends(state)]) -> PlainTextResponse:
    """Prometheus text format: runs by status, workers alive, the database up, each queue's
    depth, open SSE streams."""
    lines = []
    try:
        by_status, workers = await run_in_threadpool(_counts, app)
        lines += ["# HELP trm_runs Runs by status.", "# TYPE trm_runs gauge"]
        lines += [f'trm_runs{{status="{s}"}} {by_status.get(s, 0)}' for s in RUN_STATUSES]
        lines += [
            "# HELP trm_workers_alive Workers with a fresh heartbeat.",
            "# TYPE trm_workers_alive gauge",
            f"trm_workers_alive {workers}",
        ]
        db_up = 1
    except sa.exc.SQLAlchemyError:
        db_up = 0
    lines += ["# TYPE trm_database_up gauge", f"trm_database_up {db_up}"]
    if app.pool is not None:
        lines += ["# HELP trm_queue_depth Jobs waiting per queue.", "# TYPE trm_queue_depth gauge"]
        for queue in QUEUES:
            try:
                depth = await app.pool.zcard(app.settings.queue_name(queue))
            except Exception:
                continue
            lines.append(f'trm_queue_depth{{queue="{queue}"}} {depth}')
    rss = psutil.Process().memory_info().rss
    lines += [
        "# HELP trm_sse_subscribers Open SSE streams.",
        "# TYPE trm_sse_subscribers gauge",
        f"trm_sse_subscribers {app.hub.count}",
        "# TYPE trm_api_rss_bytes gauge",
        f"trm_api_rss_bytes {rss}",
    ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")
