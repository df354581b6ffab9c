"""What can be done with runs: submit (validated, idempotent, queued), list, show, cancel.

The API's routes stay thin and call these; the hill-climb coordinator submits its candidates
through the same `submit_runs`, so every run is recorded and queued one way. The CLI talks to the
routes over HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from typing import Any

import redis
import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session, col, select

from core import db
from core.datasets import resolve_datasets
from core.errors import ApiError, validation_error
from core.events import Publisher
from core.models import RUN_STATUSES, LedgerEntry, Run, Stage
from core.notify import check_notify_url
from core.paths import resolve_api_paths
from core.queue import enqueue_many
from core.runstate import set_status
from core.schemas.specs import SPEC_MODELS, queue_for, step_limits, work_seconds
from core.schemas.strings import refuse_unstorable, string_problem
from core.settings import Settings
from core.submit_checks import check_submit

log = logging.getLogger("trm.runs")
# The database is not answering: no run of a batch can be written, each sender gets the 503.
DATABASE_AWAY = (*db.DATABASE_AWAY, sa.exc.TimeoutError)
Outcome = tuple[Run, bool] | Exception


# The service's own idempotency keys (a search's candidates) start with this; a client's may
# not, so a client can never take (or replay) a key a search will ask for.
INTERNAL_KEY_PREFIX = "trm-internal/"


def candidate_key(search_id: str, candidate_id: str) -> str:
    return f"{INTERNAL_KEY_PREFIX}{search_id}:{candidate_id}"


def check_client_key(idempotency_key: str | None) -> None:
    """A 422 when a client's Idempotency-Key is in the service's own namespace."""
    if idempotency_key and idempotency_key.startswith(INTERNAL_KEY_PREFIX):
        message = f"keys starting with {INTERNAL_KEY_PREFIX!r} are reserved for the service"
        raise ApiError(
            422,
            "validation_error",
            f"Idempotency-Key: {message}",
            [{"field": "Idempotency-Key", "message": message}],
        )


def body_hash(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def validate_spec(body: Any, settings: Settings) -> Any:
    """The typed spec, or a 422 naming the field; then the settings' limits."""
    if not isinstance(body, dict):
        raise ApiError(
            422,
            "validation_error",
            "body: a run spec must be a JSON object",
            [{"field": "body", "message": "expected an object"}],
        )
    kind = body.get("kind")
    if not isinstance(kind, str) or kind not in SPEC_MODELS:
        allowed = ", ".join(sorted(SPEC_MODELS))
        raise ApiError(
            422,
            "validation_error",
            f"kind: must be one of {allowed} (got {kind!r})",
            [{"field": "kind", "message": f"must be one of {allowed}"}],
        )
    refuse_unstorable(body)
    try:
        # The kind's own model: the union's tag would lead every error's field path, and
        # `bench.router` reads as the bench spec's `bench` field.
        spec: Any = SPEC_MODELS[kind].model_validate(body)
    except ValidationError as exc:
        raise validation_error(list(exc.errors()), body=body) from None
    limits = [(f, n, settings.max_steps) for f, n in step_limits(spec) if n is not None]
    if getattr(spec, "max_candidates", None) is not None:
        limits.append(("max_candidates", spec.max_candidates, settings.max_candidates))
    if spec.budget.max_seconds is not None:
        limits.append(("budget.max_seconds", spec.budget.max_seconds, settings.max_seconds))
    for field, asked, limit in limits:
        if asked > limit:
            raise ApiError(
                422,
                "validation_error",
                f"{field}: {asked} is over this server's limit of {limit}",
                [{"field": field, "message": f"at most {limit}"}],
            )
    # Work, not steps: refused when over TRM_MAX_SECONDS, unless a budget stops the run in time.
    work = work_seconds(spec)
    if work is not None and spec.budget.max_seconds is None and work[1] > settings.max_seconds:
        field, seconds, how = work
        message = (
            f"{how} is {seconds:.0f} s of work, over this server's limit of "
            f"{settings.max_seconds} s (TRM_MAX_SECONDS); lower {field} or set budget.max_seconds"
        )
        raise ApiError(
            422, "validation_error", f"{field}: {message}", [{"field": field, "message": message}]
        )
    if spec.notify is not None:
        refusal = check_notify_url(spec.notify.url, settings)
        if refusal:
            raise ApiError(
                422,
                "validation_error",
                f"notify.url: {refusal}",
                [{"field": "notify.url", "message": refusal}],
            )
    return spec


def prepare_run(
    settings: Settings, body: Any, idempotency_key: str | None, parent_id: str | None = None
) -> Run:
    """Validate a submission and build its run (nothing is written): a 422 names the field.
    The run carries what decides a replay: its `idempotency_key` and `spec_hash`."""
    if idempotency_key is not None and not idempotency_key.strip():
        raise ApiError(
            422,
            "validation_error",
            "Idempotency-Key: must not be empty",
            [{"field": "Idempotency-Key", "message": "must not be empty"}],
        )
    if idempotency_key is not None and (problem := string_problem(idempotency_key)):
        raise ApiError(
            422,
            "validation_error",
            f"Idempotency-Key: {problem}",
            [{"field": "Idempotency-Key", "message": problem}],
        )
    spec = validate_spec(body, settings)
    resolved = spec.model_dump(mode="json")
    resolve_datasets(resolved, settings.data_dir)
    resolve_api_paths(resolved, settings.data_dir, settings.model_cache)
    check_submit(resolved, settings, spec.dry_run)
    return Run(
        kind=spec.kind,
        # A dry run only resolves and checks: it must not wait behind training for the gpu slot.
        queue="cpu" if spec.dry_run else queue_for(spec),
        name=spec.name,
        parent_id=parent_id,
        spec=resolved,
        spec_hash=body_hash(body),
        idempotency_key=idempotency_key or None,
        dry_run=spec.dry_run,
        max_attempts=spec.max_attempts or settings.max_attempts,
    )


def record_runs(publisher: Publisher, arrivals: list[Run]) -> list[Outcome]:
    """Record new runs in one transaction (the API's group commit; the launcher passes one).

    Per run, in order: (run, created), or its own error (the 409 of a key reused with another
    body). Same key and same body give the same run, within the batch too. When the batch's
    insert fails, each run is recorded alone, so only a run the database refused fails (its
    sender gets its error); only the database being away is raised for the whole batch."""
    keys = {run.idempotency_key for run in arrivals if run.idempotency_key}
    known = _by_keys(publisher, keys) if keys else {}
    results: list[Outcome] = []
    fresh: list[Run] = []
    for run in arrivals:
        earlier = known.get(run.idempotency_key) if run.idempotency_key else None
        if earlier is not None:
            results.append(_replay(earlier, run))
            continue
        fresh.append(run)
        results.append((run, True))
        if run.idempotency_key:
            known[run.idempotency_key] = run
    if not fresh:
        return results
    try:
        with publisher.transaction() as tx:
            tx.add_runs([(run, _first_event(run)) for run in fresh])
    except DATABASE_AWAY:
        raise
    except Exception as exc:
        if len(arrivals) > 1:
            # One run the database refused (a value it cannot store, a key another API process
            # took meanwhile) must not fail the others that arrived with it: one at a time.
            return [_record_alone(publisher, run) for run in arrivals]
        return [_refused_alone(publisher, arrivals[0], exc)]
    return results


def _refused_alone(publisher: Publisher, run: Run, exc: Exception) -> Outcome:
    """What a single run's failed insert means for its sender."""
    if isinstance(exc, sa.exc.IntegrityError) and run.idempotency_key:
        # Two requests with one key raced (another API process); the other one won.
        existing = _by_keys(publisher, {run.idempotency_key}).get(run.idempotency_key)
        if existing is not None:
            return _replay(existing, run)
    if isinstance(exc, sa.exc.DataError | UnicodeError | ValueError):
        log.warning("run refused by the database: %s", exc)
        message = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return ApiError(
            422,
            "bad_input",
            f"the database cannot store this run: {message}",
            {"database_error": type(exc).__name__},
        )
    return exc


def _record_alone(publisher: Publisher, run: Run) -> Outcome:
    try:
        return record_runs(publisher, [run])[0]
    except DATABASE_AWAY:
        raise
    except Exception as exc:  # its own failure: the others are still recorded
        log.exception("run %s not recorded", run.id)
        return exc


def submit_runs(publisher: Publisher, settings: Settings, arrivals: list[Run]) -> list[Outcome]:
    """Record runs (`record_runs`) and queue each that is waiting, in one Redis round trip: the
    one way a run enters the queue. Re-queuing a replayed run that is still queued is harmless
    (the queue refuses an attempt it holds) and heals a job Redis lost."""
    outcomes = record_runs(publisher, arrivals)
    waiting = [o[0] for o in outcomes if isinstance(o, tuple) and o[0].status == "queued"]
    if waiting and publisher.redis is not None:
        jobs = [(run.id, run.attempt, run.queue) for run in waiting]
        try:
            enqueue_many(publisher.redis, settings, jobs)
        except redis.RedisError as exc:  # the runs are recorded; the reconciler queues them
            log.warning("enqueue of %d runs deferred: %s", len(jobs), exc)
    return outcomes


def submit_run(
    publisher: Publisher,
    settings: Settings,
    body: Any,
    idempotency_key: str | None,
    parent_id: str | None = None,
    *,
    queue: bool = True,
) -> tuple[Run, bool]:
    """(run, created), recorded and queued. Same key + same body gives the same run; another body
    gives 409. `queue=False` records it only, for callers that execute it themselves (tests,
    benches)."""
    runs = [prepare_run(settings, body, idempotency_key, parent_id)]
    (outcome,) = submit_runs(publisher, settings, runs) if queue else record_runs(publisher, runs)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _first_event(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "kind": run.kind,
        "status": "queued",
        "previous": None,
        "attempt": 1,
        "terminal": False,
    }


def _by_keys(publisher: Publisher, keys: set[str]) -> dict[str, Run]:
    with Session(publisher.engine) as session:
        runs = session.exec(select(Run).where(col(Run.idempotency_key).in_(keys))).all()
    return {run.idempotency_key: run for run in runs if run.idempotency_key}


def _replay(existing: Run, arrival: Run) -> tuple[Run, bool] | ApiError:
    if existing.spec_hash != arrival.spec_hash:
        return ApiError(
            409,
            "idempotency_conflict",
            f"Idempotency-Key {arrival.idempotency_key!r} was used for run {existing.id} with a "
            "different body; use a new key for a new run",
            {"run_id": existing.id},
        )
    return existing, False


def get_run(session: Session, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise ApiError(404, "not_found", f"run {run_id} does not exist", {"run_id": run_id})
    return run


def run_stages(session: Session, run_id: str) -> list[Stage]:
    return list(
        session.exec(
            select(Stage).where(Stage.run_id == run_id).order_by(col(Stage.position))
        ).all()
    )


def encode_cursor(run_id: str) -> str:
    return base64.urlsafe_b64encode(run_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = base64.urlsafe_b64decode(padded.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        value = ""
    if len(value) != 26 or not value.isalnum():
        raise ApiError(
            422,
            "validation_error",
            "cursor: not a cursor this API handed out",
            [{"field": "cursor", "message": "invalid cursor"}],
        )
    return value


def list_runs(
    session: Session,
    kind: str | None,
    status: str | None,
    parent_id: str | None,
    cursor: str | None,
    limit: int,
) -> tuple[list[Run], str | None]:
    """Newest first; `next_cursor` continues after the last run of this page."""
    if status is not None and status not in RUN_STATUSES:
        raise ApiError(
            422,
            "validation_error",
            f"status: must be one of {', '.join(RUN_STATUSES)}",
            [{"field": "status", "message": "unknown status"}],
        )
    query = select(Run)
    if kind:
        query = query.where(Run.kind == kind)
    if status:
        query = query.where(Run.status == status)
    if parent_id:
        query = query.where(Run.parent_id == parent_id)
    if cursor:
        query = query.where(col(Run.id) < decode_cursor(cursor))
    rows = list(session.exec(query.order_by(col(Run.id).desc()).limit(limit + 1)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1].id) if more and rows else None)


def cancel_run(publisher: Publisher, run_id: str) -> Run:
    """A queued run is cancelled at once; a running one is asked to stop (the worker ends it)."""
    with publisher.transaction() as tx:
        run = get_run(tx.session, run_id)
        if run.terminal:
            if run.status == "cancelled":
                return run
            raise ApiError(
                409,
                "not_cancellable",
                f"run {run_id} already ended {run.status}",
                {"status": run.status},
            )
        if run.status in ("queued", "interrupted"):
            if set_status(tx, run, "cancelled", cancel_requested=True):
                return run
            tx.session.refresh(run)
        run.cancel_requested = True
        tx.session.add(run)
        tx.session.flush()
        tx.emit(
            run.id,
            "log",
            {
                "message": "cancel requested; the worker stops the run at its next step",
                "cancel_requested": True,
            },
        )
        return run


def ledger(session: Session, run_id: str) -> list[LedgerEntry]:
    get_run(session, run_id)
    return list(
        session.exec(
            select(LedgerEntry)
            .where(LedgerEntry.search_id == run_id)
            .order_by(col(LedgerEntry.seq))
        ).all()
    )
