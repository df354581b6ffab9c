"""The FastAPI application: `create_app()` wires settings, database, Redis, live fan-out, routes.

Refuses to start on an un-migrated database (the message names `trm db upgrade`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__
from app.deps import AppState, require_token
from app.errors import install_handlers
from app.guard import BrowserGuard
from app.intake import Intake
from app.live import LiveHub
from app.routes import (
    artifacts,
    benches,
    controllers,
    dashboard,
    datasets,
    events,
    health,
    runs,
    uploads,
    workers,
)
from core.db import check_migrated, get_engine
from core.errors import ApiError, error_body
from core.events import Publisher
from core.heap import frozen_heap
from core.queue import create_arq_pool
from core.redisconn import sync_redis
from core.schemas.specs import RUN_SPEC
from core.settings import Settings, get_settings

if TYPE_CHECKING:
    from anyio.abc import TaskGroup, TaskStatus

    from trm_mcp.server import StreamableHttp

log = logging.getLogger("trm.api")


class BodyLimit:
    """413 for a body over the limit, whether it declares its length or streams it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope["method"] == "PUT"
            and ("/artifacts/" in scope["path"] or scope["path"].startswith("/datasets/"))
        ):  # uploads stream to disk with a checksum and their own limits (routes/uploads.py,
            # routes/datasets.py)
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        import json

        body = json.dumps(
            error_body("payload_too_large", f"request body is over {self.max_bytes} bytes")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class TokenGate:
    """/mcp is an ASGI app, not a FastAPI route: the same token check runs before it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await require_token(Request(scope))
        except ApiError as exc:
            body = error_body(exc.code, exc.message, exc.details)
            await JSONResponse(body, status_code=exc.status)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class LazyMcp:
    """/mcp's transport (trm_mcp.server), imported and started on the first call that gets past
    the token: the MCP SDK costs each API process a few tenths of a second of CPU to import, and
    most API processes never serve an MCP call. `lifespan()` must run around serving."""

    def __init__(self, api_app: ASGIApp) -> None:
        self.api_app = api_app
        self.transport: StreamableHttp | None = None
        self.group: TaskGroup | None = None
        self.lock = anyio.Lock()
        self.stop = anyio.Event()

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self.stop = anyio.Event()
        async with anyio.create_task_group() as group:
            self.group = group
            try:
                yield
            finally:
                self.group, self.transport = None, None
                self.stop.set()  # the transport's lifespan, when started, ends here

    async def _serve(self, transport: StreamableHttp, *, task_status: TaskStatus[None]) -> None:
        async with transport.lifespan():
            task_status.started()
            await self.stop.wait()

    async def _started(self) -> StreamableHttp:
        async with self.lock:
            if self.transport is None:
                if self.group is None:
                    raise RuntimeError("/mcp is served only inside the app's lifespan")
                # Imported off the event loop: the API's other requests go on meanwhile.
                mounted = await anyio.to_thread.run_sync(_mcp_mounted)
                transport = mounted(self.api_app)
                await self.group.start(self._serve, transport)
                self.transport = transport
            return self.transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = self.transport or await self._started()
        await transport(scope, receive, send)


def _mcp_mounted() -> Callable[[ASGIApp], StreamableHttp]:
    from trm_mcp.server import mounted  # deferred to the first /mcp call (LazyMcp)

    return mounted


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    engine = get_engine(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        check_migrated(engine)
        # Sync routes run in anyio's threadpool; more threads than pooled database connections
        # only queue for a connection (or open and close overflow ones) and fight for the GIL.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        hub = LiveHub(settings)
        publisher = Publisher(engine, sync_redis(settings), settings)
        trm = AppState(settings, engine, publisher, hub, Intake(publisher, settings))
        try:
            trm.pool = await create_arq_pool(settings)
        except Exception as exc:  # runs are still recorded; the reconciler enqueues them later
            log.warning("Redis is not answering (%s); runs will queue once it is back", exc)
        if settings.decide_url:
            # Keep a connection per concurrent caller: the default 20 idle reopened the rest.
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            trm.decide = httpx.AsyncClient(base_url=settings.decide_url, timeout=60, limits=limits)
        await hub.start()
        trm.intake.start()
        app.state.trm = trm
        # What start-up loaded is kept out of the collector's full passes (core/heap.py: at
        # 300 runs/s with 500 event streams, passes of 107 ms -> 35 ms).
        with frozen_heap():
            async with mcp_http.lifespan():
                yield
        await trm.intake.stop()
        await hub.stop()
        if trm.decide is not None:
            await trm.decide.aclose()
        if trm.pool is not None:
            await trm.pool.close()

    # /openapi.json and /docs are served below behind the token like every route but /healthz.
    app = FastAPI(
        title="TRM trainer service",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        telemetry={"tracing": settings.otel, "metrics": settings.otel, "logs": settings.otel},
    )
    install_handlers(app)
    auth = [Depends(require_token), Depends(runs.refuse_unstorable_request)]
    for module in (runs, events, artifacts, uploads, benches, workers, controllers, datasets):
        app.include_router(module.router, dependencies=auth)
    app.include_router(health.router)
    # The MCP server (trm_mcp) calls this same API in-process, with the caller's token.
    mcp_http = LazyMcp(app)
    app.router.routes.append(Route("/mcp", TokenGate(mcp_http), include_in_schema=False))

    # The page loads without the token, then asks for it (every API call it makes needs it).
    app.include_router(dashboard.router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        spec_schema = RUN_SPEC.json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(spec_schema.pop("$defs", {}))
        components["RunSpec"] = spec_schema
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/openapi.json", dependencies=auth, include_in_schema=False)
    def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", dependencies=auth, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=app.title)

    app.add_middleware(
        BrowserGuard,
        bind=settings.api_host,
        allowed_hosts=settings.allowed_hosts.split(","),
        open_api=settings.api_token is None,
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app
