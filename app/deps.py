"""Dependencies injected into routes: the app's shared state, a session, and the token check."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import sqlalchemy as sa
from arq.connections import ArqRedis
from fastapi import Request
from sqlmodel import Session

from app.intake import Intake
from app.live import LiveHub
from core.errors import ApiError
from core.events import Publisher
from core.settings import Settings


@dataclass
class AppState:
    settings: Settings
    engine: sa.Engine
    publisher: Publisher
    hub: LiveHub
    intake: Intake
    pool: ArqRedis | None = None
    # The decision process's client (TRM_DECIDE_URL); None when none is configured.
    decide: httpx.AsyncClient | None = None


def app_state(request: Request) -> AppState:
    return request.app.state.trm


# The dependencies that do no I/O are `async def`: FastAPI runs a plain `def` dependency in its
# threadpool, a thread hand-off (and a wait for the GIL) per dependency per request.
async def state(request: Request) -> AppState:
    return app_state(request)


def session(request: Request) -> Iterator[Session]:
    s = Session(app_state(request).engine, expire_on_commit=False)
    try:
        yield s
    finally:
        # With the database gone, close() fails too, after the 503 was sent: that would cut the
        # connection instead of answering. The pool drops the dead connection either way.
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            s.close()


async def require_token(request: Request) -> None:
    """When TRM_API_TOKEN is set, every route but /healthz needs `Authorization: Bearer`."""
    expected = app_state(request).settings.api_token
    if expected is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), expected.get_secret_value().encode()
    )
    if not ok:
        raise ApiError(
            401,
            "unauthorized",
            "missing or wrong token: set the TRM_API_TOKEN variable to the server's token "
            "(trm and trm mcp send it as the bearer token)",
        )


def caller(request: Request) -> str:
    """Who is calling, as far as the API can tell: one token guards it, so a caller is "token"
    (it presented TRM_API_TOKEN) or "anonymous" (the API is open)."""
    return "token" if app_state(request).settings.api_token is not None else "anonymous"
