"""/controllers: promote a run under a name, list and show versions, roll back, and decide
through the decision process (SPEC §12). The API never loads a model: `decide` forwards to
TRM_DECIDE_URL (`trm decide-server`)."""

from __future__ import annotations

import logging
from typing import Annotated

import httpx
import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlmodel import Session

from app.deps import AppState, caller, session, state
from core import controllers as ops
from core import promotion, routing
from core.controllers import (
    ControllerList,
    ControllerOut,
    DecideBody,
    DecideOut,
    PromoteIn,
    RollbackIn,
    VersionOut,
)
from core.decisions import MAX_PAGE, DecisionPage, OutcomesIn, OutcomesOut, report_outcomes
from core.decisions import list_decisions as list_logged
from core.errors import ApiError
from core.routing import PromoteShadowIn, SettingsIn, ShadowIn
from core.schemas.runs import ErrorOut
from core.schemas.strings import string_problem

log = logging.getLogger("trm.api")
router = APIRouter(
    tags=["controllers"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)


@router.post(
    "/controllers",
    summary="Promote a run as a controller's next version",
    status_code=201,
    response_model=VersionOut,
    responses={409: {"model": ErrorOut}},
)
def promote(
    body: PromoteIn, request: Request, app: Annotated[AppState, Depends(state)]
) -> VersionOut:
    """Promote a completed train run (or a completed hill-climb's best candidate, or a bench's
    own trained router) as the name's next version; it becomes the live one at once."""
    who = caller(request)
    if body.by:
        problem = string_problem(body.by)
        if problem:
            raise ApiError(
                422, "validation_error", f"by: {problem}", [{"field": "by", "message": problem}]
            )
        who = f"{body.by} ({who})"
    return promotion.promote(app.engine, app.settings, body, who)


@router.get("/controllers", response_model=ControllerList, summary="List controllers")
def list_controllers(db: Annotated[Session, Depends(session)]) -> ControllerList:
    """Every named controller: its live version (run, trainer, anchor score) and how many
    versions it has."""
    return ops.list_controllers(db)


@router.get("/controllers/{name}", response_model=ControllerOut, summary="Show a controller")
def show_controller(name: str, db: Annotated[Session, Depends(session)]) -> ControllerOut:
    """One controller: every version (its run, trainer, anchor score, who promoted it and
    when), which one is live, the decision log setting, and the shadow version with its
    agreement so far."""
    return ops.show(db, ops.check_name(name))


@router.post(
    "/controllers/{name}/rollback", response_model=ControllerOut, summary="Roll back to a version"
)
def rollback(
    name: str, body: RollbackIn, app: Annotated[AppState, Depends(state)]
) -> ControllerOut:
    """Make an earlier version live again (any existing version may be named)."""
    return ops.rollback(app.engine, ops.check_name(name), body.version)


@router.patch(
    "/controllers/{name}", response_model=ControllerOut, summary="Change a controller's settings"
)
def change_controller(
    name: str, body: SettingsIn, app: Annotated[AppState, Depends(state)]
) -> ControllerOut:
    """Turn the decision log on or off (`log_decisions`)."""
    return routing.set_logging(app.engine, ops.check_name(name), body)


@router.post("/controllers/{name}/shadow", response_model=ControllerOut, summary="Shadow a version")
def shadow(name: str, body: ShadowIn, app: Annotated[AppState, Depends(state)]) -> ControllerOut:
    """Run a candidate version beside the live one on every call (it never changes the answer;
    its agreement is in `shadow`); `{"version": null}` stops it."""
    return routing.set_shadow(app.engine, ops.check_name(name), body.version)


@router.post(
    "/controllers/{name}/promote-shadow",
    summary="Make the shadow version live",
    response_model=ControllerOut,
    responses={409: {"model": ErrorOut}},
)
def promote_shadow(
    name: str, body: PromoteShadowIn, app: Annotated[AppState, Depends(state)]
) -> ControllerOut:
    """Make the shadow version live when it has shadowed `min_decisions` rows and agreed with
    the live answer on `min_agreement` of them; a 409 naming its figures otherwise."""
    return routing.promote_shadow(app.engine, ops.check_name(name), body)


@router.post("/controllers/{name}/outcomes", response_model=OutcomesOut, summary="Report outcomes")
def outcomes(name: str, body: OutcomesIn, app: Annotated[AppState, Depends(state)]) -> OutcomesOut:
    """What happened after logged decisions: all recorded or none (an unknown id is a 404
    naming it); a decision's later outcome replaces its earlier one."""
    return report_outcomes(app.engine, ops.check_name(name), body)


@router.get(
    "/controllers/{name}/decisions", response_model=DecisionPage, summary="The decision log"
)
def decisions(
    name: str,
    db: Annotated[Session, Depends(session)],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    before: Annotated[str | None, Query(max_length=26)] = None,
    with_outcomes: bool | None = None,
) -> DecisionPage:
    """The logged decisions, newest first; `before` (a page's `next_before`) pages back;
    `with_outcomes` true/false keeps those with/without an outcome."""
    ops.resolve(db, ops.check_name(name), None)  # a 404 for an unknown name
    return list_logged(db, name, limit, before, with_outcomes)


@router.post(
    "/controllers/{name}/decide",
    summary="Decide",
    response_model=DecideOut,
    responses={503: {"model": ErrorOut}, 413: {"model": ErrorOut}},
)
async def decide(
    name: str, body: DecideBody, request: Request, app: Annotated[AppState, Depends(state)]
) -> Response:
    """Each row's action, every candidate's probability, the margin and whether the controller
    abstains, from the live version (or `version`), all rows by one version. Forwarded to the
    decision process (`trm decide-server`, `TRM_DECIDE_URL`; 503 when none answers). With the
    decision log on, each row's answer carries the `decision_id` its outcome is reported by."""
    ops.check_name(name)
    if app.decide is None:
        raise ApiError(
            503,
            "unavailable",
            "no decision process is configured: start one with `trm decide-server` (or `trm up`) "
            "and set TRM_DECIDE_URL for the API",
        )
    payload = {"controller": name, **body.model_dump(mode="json")}
    # The decision process asks for the same token as the API.
    token = request.headers.get("authorization")
    headers = {"content-type": "application/json"}
    if token and app.settings.api_token:
        headers["authorization"] = token
    try:
        # The body as orjson writes it: the same JSON as httpx's `json=`, in a fraction of the
        # time (a routerBench row's 1.3k-character state is most of it).
        answer = await app.decide.post("/decide", content=orjson.dumps(payload), headers=headers)
    except httpx.TransportError as exc:
        raise ApiError(
            503,
            "unavailable",
            f"the decision process at {app.settings.decide_url} is not answering "
            f"({type(exc).__name__}); is `trm decide-server` running?",
            {"retry_after_s": 2},
        ) from None
    # The decision process's answer goes out as it came (no parse and dump again per call);
    # anything but its JSON (a proxy's error page) is a 502.
    if not answer.headers.get("content-type", "").startswith("application/json"):
        log.warning("decision process answered %s without JSON", answer.status_code)
        raise ApiError(502, "bad_gateway", "the decision process answered without JSON")
    passed = {k: v for k, v in answer.headers.items() if k.lower() == "retry-after"}
    return Response(
        answer.content,
        status_code=answer.status_code,
        media_type="application/json",
        headers=passed,
    )
