"""Run status transitions (SPEC §3.1), in one place for the API, the runner and the reconciler.

Every change of status is written together with its `status` event, in one transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import col

from app.events import Tx
from app.models import TERMINAL_STATUSES, Run, utcnow

ALLOWED: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"completed", "failed", "cancelled", "interrupted"}),
    "interrupted": frozenset({"queued", "failed", "cancelled"}),
}


class TransitionError(RuntimeError):
    pass


def status_payload(run: Run, previous: str | None) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "kind": run.kind,
        "status": run.status,
        "previous": previous,
        "attempt": run.attempt,
        "worker_id": run.worker_id,
        "phase": run.phase,
        "percent": run.percent,
        "failure_class": run.failure_class,
        "failure_reason": run.failure_reason,
        "stopped_by": run.stopped_by,
        "terminal": run.status in TERMINAL_STATUSES,
    }


def set_status(
    tx: Tx, run: Run, status: str, *, expect_lease: int | None = None, **fields: Any
) -> bool:
    """Compare-and-set: applies only if the run is still in the status (and, for a worker, still
    under the lease) the caller saw. False means someone else moved it first; nothing changed."""
    previous = run.status
    if status not in ALLOWED.get(previous, frozenset()):
        raise TransitionError(f"run {run.id}: {previous} -> {status} is not a valid transition")
    values: dict[str, Any] = dict(fields, status=status)
    now = utcnow()
    if status == "running" and run.started_at is None:
        values["started_at"] = now
    if status in TERMINAL_STATUSES:
        values["finished_at"] = now
        if status == "completed":
            values["percent"] = 100.0
    stmt = sa.update(Run).where(col(Run.id) == run.id, col(Run.status) == previous)
    if expect_lease is not None:
        stmt = stmt.where(col(Run.lease_token) == expect_lease)
    if tx.session.execute(stmt.values(**values)).rowcount != 1:  # type: ignore[attr-defined]
        return False
    for key, value in values.items():
        set_committed_value(run, key, value)
    tx.emit(run.id, "status", status_payload(run, previous))
    return True
