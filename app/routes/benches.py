"""/benches: the bench menu and starting a bench run (SPEC §7, §10).

`POST /benches/{name}` takes an optional JSON body of BenchSpec fields (`baseline`, `router`,
`repeats`, ...) and queues a `bench` run exactly as `POST /runs` does. With `?dry_run=true` the
run is a dry run (the worker writes bench.resolved.json and planned manifests) and the response
also carries the resolved config, computed here from the menu and the runs directory.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.deps import AppState, state
from app.routes.runs import accept_run, accepted, parse_json
from core.benches.menu import bench_names, menu  # light: json only
from core.benches.resolve import ResolveError, resolve_bench
from core.errors import ApiError
from core.runs import validate_spec
from core.schemas.runs import ErrorOut

log = logging.getLogger("trm.api")
router = APIRouter(
    tags=["benches"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)


@router.get("/benches", summary="The bench menu")
def list_benches() -> dict[str, Any]:
    """The shipped benches (`specs/benches/`): each one's description, families, anchor worlds,
    defaults, and for an external bench its data and baselines."""
    return {"benches": menu()}


@router.post(
    "/benches/{name}",
    summary="Start a bench",
    status_code=202,
    responses={409: {"model": ErrorOut}},
)
async def start_bench(
    name: str,
    request: Request,
    app: Annotated[AppState, Depends(state)],
    dry_run: Annotated[
        bool, Query(description="answer the plan (sides, anchors, stages) and queue nothing")
    ] = False,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="the same key and body give back the same run"),
    ] = None,
) -> JSONResponse:
    """Queue a bench run with the bench's defaults, any of them overridden in the body
    (`router`, `baseline`, `episodes`, `train_sample`, `data`, ...). The router is scored on
    the bench's anchors beside the baseline and the references; `router: "train"` trains one
    inside the run first. A bench with nothing to score is a 422 naming `router`."""
    if name not in bench_names():
        raise ApiError(
            404,
            "not_found",
            f"no bench {name!r}; known: {', '.join(bench_names())}",
            {"known": bench_names()},
        )
    raw = await request.body()
    overrides = parse_json(raw) if raw.strip() else {}
    if not isinstance(overrides, dict):
        raise ApiError(422, "validation_error", "body: must be a JSON object of bench fields")
    body = {**overrides, "kind": "bench", "bench": name}
    if dry_run:
        body["dry_run"] = True
    resolved = None
    if body.get("dry_run"):
        settings = app.settings
        # Typed first: resolution reads the fields as the spec types them (a mistyped `router`
        # was a 500 here), and a bad field gets the 422 POST /runs would give.
        typed = await run_in_threadpool(validate_spec, body, settings)
        spec = typed.model_dump(mode="json")
        try:
            resolved = resolve_bench(
                spec, settings.runs_dir, settings.data_dir, settings.model_cache
            )
        except ResolveError as exc:
            raise ApiError(422, exc.failure_class, exc.reason) from None
    run, created = await accept_run(app, body, idempotency_key)
    return accepted(run, created, {"resolved": resolved} if resolved is not None else None)
