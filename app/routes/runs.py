"""/runs: submit, list, show, cancel, ledger (SPEC §10)."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlmodel import Session

from app.deps import AppState, session, state
from core import runs as run_ops
from core.errors import ApiError
from core.models import Run
from core.schemas.runs import ErrorOut, LedgerOut, RunList, RunOut
from core.schemas.strings import refuse_unstorable, string_problem

log = logging.getLogger("trm.api")
router = APIRouter(
    tags=["runs"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)

# Headers whose values reach the database: an idempotency key is stored, an event id looked up.
STORED_HEADERS = ("Idempotency-Key", "Last-Event-ID")
SPEC_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunSpec"}}},
    }
}


async def refuse_unstorable_request(request: Request) -> None:
    """A 422 naming the parameter when a path or query parameter, or a header the service
    stores or looks up by, holds a value no database can take (a NUL): on Postgres such a value
    in a lookup was a 500. Every token-guarded route runs this (app/main.py). So does a JSON
    body of any route, read once (the route reuses it): an outcome's notes or a decide row with
    a NUL were a 500 on Postgres, and NaN passes Python's JSON parser into float fields. PUT
    bodies are uploads, streamed to disk by their routes and never read here."""
    if request.method in ("POST", "PATCH", "DELETE") and request.headers.get(
        "content-type", ""
    ).lower().startswith("application/json"):
        try:
            body = await request.json()  # the parse FastAPI made for the route, when it did
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            body = None  # the route's own parse answers, naming line and column
        refuse_unstorable(body)
    params = [
        *((f"path.{k}", v) for k, v in request.path_params.items()),
        *((f"query.{k}", v) for k, v in request.query_params.multi_items()),
        *((h, request.headers[h]) for h in STORED_HEADERS if h in request.headers),
    ]
    for name, value in params:
        problem = string_problem(name) or string_problem(str(value))
        if problem:
            raise ApiError(
                422, "validation_error", f"{name}: {problem}", [{"field": name, "message": problem}]
            )


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            "bad_json",
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            {"line": exc.lineno, "column": exc.colno},
        ) from None
    except (UnicodeDecodeError, RecursionError):
        raise ApiError(400, "bad_json", "body is not valid UTF-8 JSON") from None


async def accept_run(
    app: AppState, body: Any, idempotency_key: str | None, parent_id: str | None = None
) -> tuple[Run, bool]:
    """Record the run (validated, idempotent) and put it on its queue: the one way runs arrive.
    Concurrent submissions are recorded and queued together (app/intake.py)."""
    run_ops.check_client_key(idempotency_key)
    return await app.intake.submit(body, idempotency_key, parent_id)


def accepted(run: Run, created: bool, extra: dict[str, Any] | None = None) -> JSONResponse:
    """202 with the run, its Location, and whether an Idempotency-Key replayed it."""
    headers = {"Location": f"/runs/{run.id}"}
    if not created:
        headers["Idempotent-Replayed"] = "true"
    body = RunOut.of(run).model_dump(mode="json") | (extra or {})
    return JSONResponse(body, status_code=202, headers=headers)


@router.post(
    "/runs",
    summary="Submit a run",
    status_code=202,
    response_model=RunOut,
    openapi_extra=SPEC_BODY,
    responses={409: {"model": ErrorOut}, 413: {"model": ErrorOut}, 501: {"model": ErrorOut}},
)
async def submit_run(
    request: Request,
    app: Annotated[AppState, Depends(state)],
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="the same key and body give back the same run"),
    ] = None,
    format: Annotated[
        str | None,
        Query(
            pattern="^(trm|skill)$",
            description="`skill`: the body is one of the skill's own spec files, translated "
            "(the answer carries `warnings` and `translated_spec`)",
        ),
    ] = None,
) -> JSONResponse:
    """Queue a run of any kind (`train`, `bench`, `hillclimb`, `selftest`): the body is a run
    spec ([spec fields](specs.md)), validated and recorded, then put on its queue; the answer is
    the run (202, `Location: /runs/{id}`). Same `Idempotency-Key` and body: the same run
    (header `Idempotent-Replayed: true`); another body: 409. Limits over this server's
    settings are a 422 naming the field."""
    body = parse_json(await request.body())
    if format == "skill":
        from core.translate import error_details, translate_skill_spec

        body, warnings, problems = await run_in_threadpool(
            translate_skill_spec, body, app.settings.data_dir
        )
        if problems:
            first = problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            raise ApiError(422, "validation_error", first, error_details(problems))
        run, created = await accept_run(app, body, idempotency_key)
        return accepted(run, created, {"warnings": warnings, "translated_spec": body})
    return accepted(*await accept_run(app, body, idempotency_key))


@router.get("/runs", response_model=RunList, summary="List runs")
def list_runs(
    db: Annotated[Session, Depends(session)],
    kind: str | None = None,
    status: str | None = None,
    parent: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunList:
    """Runs, newest first, with their status, card line and `best_anchor`. Filters: `kind`
    (`train`, `bench`, `hillclimb`, `selftest`), `status` (`queued`, `running`, `completed`,
    ...), `parent` (a hill-climb's candidates); `limit` runs a page, and `cursor` (a page's
    `next_cursor`) continues after it."""
    rows, next_cursor = run_ops.list_runs(db, kind, status, parent, cursor, limit)
    return RunList(runs=[RunOut.of(r) for r in rows], next_cursor=next_cursor)


@router.get("/runs/{run_id}", response_model=RunOut, summary="Show a run")
def show_run(run_id: str, db: Annotated[Session, Depends(session)]) -> RunOut:
    """One run in full: its spec, status, attempts, card, usage, failure (class and reason)
    and each stage with its status and manifest."""
    run = run_ops.get_run(db, run_id)
    return RunOut.of(run, full=True, stages=run_ops.run_stages(db, run_id))


@router.post(
    "/runs/{run_id}/cancel",
    summary="Cancel a run",
    status_code=202,
    response_model=RunOut,
    responses={409: {"model": ErrorOut}},
)
def cancel_run(run_id: str, app: Annotated[AppState, Depends(state)]) -> RunOut:
    """Cancel a queued or running run: a running stage's child is stopped within seconds
    (SIGTERM, then SIGKILL after `TRM_CANCEL_GRACE_S`) and the run ends `cancelled`. A run
    that has already ended is a 409."""
    return RunOut.of(run_ops.cancel_run(app.publisher, run_id))


@router.get("/runs/{run_id}/ledger", response_model=LedgerOut, summary="A hill-climb's ledger")
def run_ledger(run_id: str, db: Annotated[Session, Depends(session)]) -> LedgerOut:
    """Every ledger entry of a hill-climb, in order: each candidate's knobs and their change,
    rung, run, train and anchor scores, gap, the untrained score, `reused_from`, and the
    decision taken on it with its reason."""
    return LedgerOut.of(run_id, run_ops.ledger(db, run_id))
