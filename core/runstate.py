"""Run status transitions (SPEC §3.1), in one place for the API, the runner and the reconciler.

Every change of status is written together with its `status` event, in one transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import col

from core import notify  # noqa: F401  (registers webhook delivery for terminal statuses)
from core.events import Tx
from core.models import TERMINAL_STATUSES, Run, utcnow

ALLOWED: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"completed", "failed", "cancelled", "interrupted"}),
    "interrupted": frozenset({"queued", "failed", "cancelled"}),
}


class TransitionError(RuntimeError):
    pass


def next_action(run: Run) -> str:
    """What an agent following the run should do now (SKILL.md's rule: done only when `completed`
    and every stage manifest says so)."""
    base = f"/runs/{run.id}"
    if run.status == "completed":
        return (
            f"check every stage manifest says completed (GET {base}), then read "
            f"{base}/artifacts/summary.json and report"
        )
    if run.status == "failed":
        if run.failure_class == "bad_input":
            return "fix the spec (see failure_reason) and resubmit with a new Idempotency-Key"
        if run.failure_class in ("dependency", "oom"):
            return "report failure_reason; fix what it names, then resubmit with a new key"
        return f"report the failure; read {base}/artifacts for the failed stage's manifest"
    if run.status == "cancelled":
        return "nothing to do; resubmit with a new Idempotency-Key to run it again"
    if run.status == "interrupted":
        return f"wait: it is re-queued (attempt {run.attempt} of {run.max_attempts})"
    return f"wait: follow {base}/events or poll {base}/card?format=text; not done yet"


def status_payload(run: Run, previous: str | None) -> dict[str, Any]:
    terminal = run.status in TERMINAL_STATUSES
    return {
        "run_id": run.id,
        "kind": run.kind,
        "status": run.status,
        "previous": previous,
        "attempt": run.attempt,
        "worker_id": run.worker_id,
        "phase": run.phase,
        "stage": run.phase if run.status == "running" else None,
        "percent": run.percent,
        "manifest_path": f"{run.phase}/manifest.json" if run.phase and not terminal else None,
        "summary_path": "summary.json" if terminal and run.status != "cancelled" else None,
        "failure_class": run.failure_class,
        "failure_reason": run.failure_reason,
        "stopped_by": run.stopped_by,
        "terminal": terminal,
        "next_action": next_action(run),
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
