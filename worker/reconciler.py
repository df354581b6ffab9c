"""The reconciler (SPEC §3.1): on worker start and every few seconds, on any worker.

- a `running` run whose heartbeat went stale is marked `interrupted` (its worker vanished);
- an `interrupted` run is queued again as the next attempt, up to `max_attempts`,
  then `failed/crash`;
- a `queued` run that Redis no longer holds (flushed, restarted empty) is enqueued again;
- a `queued` run whose job a worker marked started but never claimed (it died in between) is
  queued again once the mark is older than a live worker takes to claim (`TRM_DB_RETRY_S` +
  `TRM_STALE_AFTER_S`), not after arq's week-long in-progress timeout;
- the job of a run that moved on (finished, on a later attempt) leaves the queue.

Every change is a compare-and-set, so several workers reconciling at once do each thing once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from arq.connections import ArqRedis
from sqlmodel import Session, col, select

from core.db import as_utc
from core.events import Publisher
from core.models import Run, WorkerRecord, utcnow
from core.queue import drop_job, enqueue, marked_jobs, requeue_stale
from core.runstate import set_status
from core.settings import Settings

log = logging.getLogger("trm.reconciler")
BATCH = 500


@dataclass
class Pass:
    interrupted: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    to_enqueue: list[tuple[str, int, str]] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)
    unstuck: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def reclaim(settings: Settings, publisher: Publisher, judge_stale: bool = True) -> Pass:
    """The database half of a pass; returns what must be (re)enqueued. `judge_stale=False`
    (this worker just lost the database itself) leaves running runs alone this pass."""
    result = Pass()
    now = utcnow()
    stale_before = now - timedelta(seconds=settings.stale_after_s)
    with publisher.transaction() as tx:
        stale = (
            tx.session.exec(
                select(Run)
                .where(Run.status == "running", col(Run.heartbeat_at) < stale_before)
                .limit(BATCH)
            ).all()
            if judge_stale
            else []
        )
        for run in stale:
            age = (now - as_utc(run.heartbeat_at)).total_seconds()  # type: ignore[operator]
            attempts = [dict(a) for a in (run.attempts or [])]
            if attempts:
                attempts[-1].update(ended_at=now.isoformat(), outcome="interrupted")
            reason = f"worker {run.worker_id} stopped heartbeating {age:.0f}s ago"
            if set_status(
                tx,
                run,
                "interrupted",
                expect_lease=run.lease_token,
                failure_reason=reason,
                attempts=attempts,
            ):
                result.interrupted.append(run.id)
        tx.session.execute(
            WorkerRecord.__table__.delete().where(  # type: ignore[attr-defined]
                col(WorkerRecord.heartbeat_at) < now - timedelta(seconds=settings.stale_after_s * 6)
            )
        )
    with publisher.transaction() as tx:
        waiting = tx.session.exec(select(Run).where(Run.status == "interrupted").limit(BATCH)).all()
        for run in waiting:
            if run.cancel_requested:
                set_status(tx, run, "cancelled")
            elif run.attempt >= run.max_attempts:
                if set_status(
                    tx,
                    run,
                    "failed",
                    failure_class="crash",
                    failure_reason=f"interrupted on all {run.max_attempts} attempts; "
                    f"last: {run.failure_reason}",
                ):
                    result.failed.append(run.id)
            elif set_status(
                tx, run, "queued", attempt=run.attempt + 1, worker_id=None, cancel_requested=False
            ):
                result.requeued.append(run.id)
                result.to_enqueue.append((run.id, run.attempt, run.queue))
    with publisher.transaction() as tx:
        old = now - timedelta(seconds=settings.requeue_after_s)
        for run in tx.session.exec(
            select(Run)
            .where(Run.status == "queued", col(Run.created_at) < old)
            .order_by(col(Run.created_at))
            .limit(BATCH)
        ).all():
            if run.id not in result.requeued:
                result.to_enqueue.append((run.id, run.attempt, run.queue))
    return result


def run_states(publisher: Publisher, run_ids: set[str]) -> dict[str, tuple[str, int, str]]:
    """(status, attempt, queue) of each run that exists."""
    with Session(publisher.engine) as session:
        rows = session.exec(select(Run).where(col(Run.id).in_(run_ids))).all()
    return {run.id: (run.status, run.attempt, run.queue) for run in rows}


async def sweep_marked(
    settings: Settings, publisher: Publisher, pool: ArqRedis, result: Pass
) -> None:
    """The Redis half for jobs a worker marked started: a running run's job is its worker's; a
    queued run's job whose mark outlived any claim is queued again; any other job is a ghost."""
    marked = await marked_jobs(pool, settings)
    if not marked:
        return
    states = await asyncio.to_thread(run_states, publisher, {run_id for _, run_id, _ in marked})
    claim_within_s = settings.db_retry_s + settings.stale_after_s
    for jid, run_id, attempt in marked:
        status, current, queue = states.get(run_id, ("gone", 0, ""))
        if current == attempt and status == "running":
            continue
        if current == attempt and status == "queued":
            if await requeue_stale(pool, settings, run_id, attempt, queue, claim_within_s):
                result.unstuck.append(run_id)
        elif await drop_job(pool, settings, jid):
            result.dropped.append(jid)


async def reconcile_once(
    settings: Settings, publisher: Publisher, pool: ArqRedis, judge_stale: bool = True
) -> Pass:
    result = await asyncio.to_thread(reclaim, settings, publisher, judge_stale)
    for run_id, attempt, queue in result.to_enqueue:
        if await enqueue(pool, settings, run_id, attempt, queue):
            result.enqueued.append(run_id)
    await sweep_marked(settings, publisher, pool, result)
    if any((result.interrupted, result.requeued, result.failed, result.enqueued, result.unstuck)):
        log.info(
            "reconciled: interrupted=%s requeued=%s failed=%s enqueued=%s unstuck=%s",
            result.interrupted,
            result.requeued,
            result.failed,
            result.enqueued,
            result.unstuck,
        )
    if result.dropped:
        log.info("jobs of runs that moved on left the queue: %s", result.dropped)
    return result
