"""The decision process (`trm decide-server`, SPEC §12): a small Starlette app on a port of its own
that answers `POST /decide` with a promoted controller's decisions. The API forwards
`POST /controllers/{name}/decide` here (TRM_DECIDE_URL) and never loads a model itself.

- **Resolution**: `name` is the live version, read from the registry tables once per call (one
  small query of the name's row, started after the call arrived; a version's own row never
  changes once promoted, so it is read once and kept), so every row of a call is decided by one
  version and a promotion or a rollback is seen by the first call that starts after its commit.
  The event loop never waits on the database.
- **Calls served together** (`Dispatcher`): calls that arrive while the process is serving
  others wait, and are then served in one trip to a worker thread: one query per name asked,
  each version loaded once, the rows checked, and a version's calls decided as one batch (up to
  `BATCH_ROWS` rows, each call's rows together), each answered with its own rows' decisions. A
  lone call is served at once; under load one query and one forward serve many calls (a trm's
  forward of 64 rows costs a few of one row's).
- **Warm versions**: loaded controllers are kept, most recently used last, at most
  TRM_DECIDE_CACHE (8) of them. Every `POLL_S` the process reads each name's live version (one
  small query) and loads the ones that moved, so the first call after a promotion or a rollback
  does not wait for the load.
- **The collector**: while it serves, what it loaded at start (libraries, the live versions) is
  frozen out of the garbage collector's full passes (`core/heap.py`): walking it took up to
  132 ms a pass, a pause every request in flight waited out.
- **A qlora version** decides through its language model (a forward a candidate): slow,
  and its answers say so in `note`.
- **Errors** are the API's body: a row the controller cannot read is a 422 naming the field
  (`rows[3].tools`), an unknown name or version a 404, a version whose files do not load a 409.
- **Token**: when TRM_API_TOKEN is set, `/decide` asks for it as the API does.
- **Decision log**: for a controller that logs (`log_decisions`, or a shadow set), the call's rows
  are inserted in one transaction before the answer leaves, each under the decision id the
  answer carries (core/decisions.py); every PRUNE_S the log is trimmed to
  TRM_DECISION_LOG_KEEP rows per controller.
- **Shadow**: a call for the live version of a controller with a shadow version is scored by
  both at once; the answer is the live version's, the shadow's action only goes to the log. A
  shadow that fails to load or to read a row is logged as no action and never fails the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import orjson
import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.controllers import (
    DecideIn,
    get_version,
    live_versions,
    parse_ref,
    resolve,
    unknown,
)
from core.db import check_migrated, get_engine
from core.decisions import PRUNE_S, prune, record
from core.errors import ApiError, error_body, validation_error
from core.heap import frozen_heap
from core.models import Controller as ControllerRow
from core.models import ControllerVersion, DecisionRecord, new_id
from core.routing import Routing
from core.schemas.strings import refuse_unstorable
from core.settings import Settings, get_settings
from worker.decide.controller import (
    NUMPY_ROWS,
    Controller,
    DecideRow,
    Decision,
    RowError,
    check_rows,
    load_controller,
)
from worker.decide.dispatch import Answered, Call, Dispatcher
from worker.decide.heap import keep_heap
from worker.decide.state_walk import parse_json

log = logging.getLogger("trm.decide")
POLL_S = 0.5  # how often the live versions are read to load a moved one ahead of its first call
# The libraries a trm and a gbdt load with, imported at start (a qlora's, transformers and peft,
# only when one is asked for: they take seconds and most of a gigabyte).
WARM_IMPORTS = ("torch", "safetensors.torch", "lightgbm", "worker.models.trm", "worker.models.gbdt")

BATCH_ROWS = NUMPY_ROWS  # the most rows of calls decided together (a trm's numpy forward)
VERSION_ROWS = 4096  # version rows kept in memory (they never change once promoted)
# A name's live and shadow versions and whether it logs: what a call reads of the registry.
_LIVE = sa.text(
    f"SELECT live_version, shadow_version, log_decisions FROM {ControllerRow.__tablename__} "
    "WHERE name = :name"
)

Key = tuple[str, int]


class Versions:
    """Loaded controller versions, least recently used first, at most `size`. A version is
    loaded once even when calls for it arrive together (they wait for the one load)."""

    def __init__(self, runs_dir: Path, size: int) -> None:
        self.runs_dir, self.size = runs_dir, size
        self._loaded: OrderedDict[Key, Controller] = OrderedDict()
        self._guard = threading.Lock()
        self._loading: dict[Key, threading.Lock] = {}

    def loaded(self) -> list[Key]:
        with self._guard:
            return list(self._loaded)

    def get(self, row: ControllerVersion) -> Controller:
        key = (row.name, row.version)
        with self._guard:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            lock = self._loading.setdefault(key, threading.Lock())
        with lock:
            with self._guard:
                if key in self._loaded:
                    return self._loaded[key]
            started = time.perf_counter()
            controller = load_controller(
                self.runs_dir / row.trainer_dir, row.trainer, row.abstain_margin
            )
            log.info(
                "loaded %s@%d (%s) in %.2fs",
                row.name,
                row.version,
                row.trainer,
                time.perf_counter() - started,
            )
            with self._guard:
                self._loaded[key] = controller
                self._loading.pop(key, None)
                while len(self._loaded) > self.size:
                    self._loaded.popitem(last=False)
            return controller


class DecideService:
    """The state of one decision process: settings, the database engine, the loaded versions."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engine: sa.Engine = get_engine(settings)
        self.versions = Versions(settings.runs_dir, settings.decide_cache)
        self._seen_live: dict[str, int] = {}
        self._rows: dict[Key, ControllerVersion] = {}
        self.dispatcher = Dispatcher(self.serve)

    def version(self, name: str, version: int | None) -> ControllerVersion:
        with Session(self.engine, expire_on_commit=False) as session:
            return resolve(session, name, version)

    def route(self, name: str, version: int | None) -> Routing:
        """core.routing.route's answer from one small query of the name's row (the version
        rows come from memory after their first read)."""
        with self.engine.connect() as conn:
            live = conn.execute(_LIVE, {"name": name}).first()
        if live is None:
            raise unknown(name)
        row = self._version_row(name, live.live_version if version is None else version)
        shadow = None
        if live.shadow_version is not None and row.version == live.live_version:
            shadow = self._version_row(name, live.shadow_version)
        return Routing(row, bool(live.log_decisions) or shadow is not None, shadow)

    def _version_row(self, name: str, version: int) -> ControllerVersion:
        key = (name, version)
        row = self._rows.get(key)
        if row is None:
            with Session(self.engine, expire_on_commit=False) as session:
                row = get_version(session, name, version)  # a 404 naming the version
            if len(self._rows) >= VERSION_ROWS:
                self._rows.clear()
            self._rows[key] = row
        return row

    def serve(self, calls: list[Call]) -> list[Answered | Exception]:
        """Each call's answer or the error it gets (`Dispatcher`): one routing query per name
        and version asked, each version loaded once, every call's rows checked (`RowError` for
        the first it cannot read), and a version's calls decided together, each call's rows in
        one forward of up to `BATCH_ROWS` rows (a larger call alone)."""
        outcomes: list[Answered | Exception | None] = [None] * len(calls)
        routes: dict[tuple[str, int | None], Routing | Exception] = {}
        together: dict[int, tuple[Controller, list[int]]] = {}  # by loaded version
        for k, call in enumerate(calls):
            ref = (call.name, call.version)
            if ref not in routes:
                try:
                    routes[ref] = self.route(*ref)
                except Exception as exc:  # a 404, or the database down: this name's calls
                    routes[ref] = exc
            routing = routes[ref]
            if isinstance(routing, Exception):
                outcomes[k] = routing
                continue
            try:
                controller = self.load(routing.version)
                check_rows(call.rows)
            except Exception as exc:  # a 409 or a 422: this call's
                outcomes[k] = exc
                continue
            if routing.shadow is not None:
                outcomes[k] = Answered(routing, controller, None)
                continue
            outcomes[k] = Answered(routing, controller, [])
            together.setdefault(id(controller), (controller, []))[1].append(k)
        for controller, ks in together.values():
            chunk: list[int] = []
            total = 0
            for k in ks:
                if chunk and total + len(calls[k].rows) > BATCH_ROWS:
                    self._decide_chunk(controller, calls, chunk, outcomes)
                    chunk, total = [], 0
                chunk.append(k)
                total += len(calls[k].rows)
            if chunk:
                self._decide_chunk(controller, calls, chunk, outcomes)
        return [o if o is not None else RuntimeError("not served") for o in outcomes]

    @staticmethod
    def _decide_chunk(
        controller: Controller,
        calls: list[Call],
        chunk: list[int],
        outcomes: list[Answered | Exception | None],
    ) -> None:
        """One forward for these calls' rows; each call's `Answered` given its own decisions."""
        rows = [row for k in chunk for row in calls[k].rows]
        try:
            decisions = controller.decide(rows)
        except Exception as exc:  # every call of the forward gets it
            for k in chunk:
                outcomes[k] = exc
            return
        start = 0
        for k in chunk:
            found = outcomes[k]
            assert isinstance(found, Answered)
            n = len(calls[k].rows)
            outcomes[k] = Answered(found.routing, found.controller, decisions[start : start + n])
            start += n

    def shadow_actions(self, row: ControllerVersion, rows: list[DecideRow]) -> list[str | None]:
        """The shadow version's action per row; None for every row when it cannot answer."""
        try:
            return [d.action for d in self.load(row).decide(rows)]
        except (ApiError, RowError) as exc:
            log.warning("shadow %s@%d did not answer: %s", row.name, row.version, exc)
            return [None] * len(rows)

    def log(
        self,
        routing: Routing,
        rows: list[DecideRow],
        decisions: list[Decision],
        shadow: list[str | None] | None,
    ) -> list[str]:
        """Insert the call's rows in the decision log; their ids, in order."""
        version, shadowed = routing.version, routing.shadow
        # Sorted: ULIDs of one millisecond differ in random bits, and the log pages by id.
        ids = sorted(new_id() for _ in rows)
        records = [
            DecisionRecord(
                id=ids[i],
                name=version.name,
                version=version.version,
                state=r.state,
                tools=list(r.tools),
                action=d.action,
                scores=d.scores,
                margin=d.margin,
                abstain=d.abstain,
                shadow_version=shadowed.version if shadowed else None,
                shadow_action=shadow[i] if shadow else None,
            )
            for i, (r, d) in enumerate(zip(rows, decisions, strict=True))
        ]
        record(self.engine, records)
        return [r.id for r in records]

    def load(self, row: ControllerVersion) -> Controller:
        try:
            return self.versions.get(row)
        except Exception as exc:  # missing or outdated files: the loaders name them
            raise ApiError(
                409,
                "not_loadable",
                f"{row.name} version {row.version} does not load from {row.trainer_dir}: {exc}",
            ) from None

    def warm(self) -> None:
        """Load the live version of every name whose live version moved since the last look
        (at the first look: every name), at most as many as the cache keeps."""
        with Session(self.engine) as session:
            live = live_versions(session)
        moved = sorted(n for n, v in live.items() if self._seen_live.get(n) != v)
        self._seen_live = live
        for name in moved[: self.versions.size]:
            if (name, live[name]) not in self.versions.loaded():
                with contextlib.suppress(ApiError):
                    self.load(self.version(name, live[name]))

    def start(self) -> None:
        """Before the first call: the model libraries imported (a first gbdt load spent 1.8 s
        importing lightgbm, a first trm as long importing torch) and the live versions loaded.
        torch and numpy's BLAS on one thread, as the trainer runs a model this small: more
        threads only wait for each other on a forward of a few rows (and a trm call of up to 64
        rows runs numpy)."""
        for module in WARM_IMPORTS:
            importlib.import_module(module)
        importlib.import_module("torch").set_num_threads(1)
        one_blas_thread()
        keep_heap()  # a call's arrays reuse the heap's memory, not fresh pages (heap.py)
        self.warm()


def one_blas_thread() -> None:
    """numpy's BLAS (OpenBLAS) on one thread, as torch: its threads wait for work spinning, and
    on a busy CPU a trm forward of 50 rows from a worker thread took 25 times its one-thread CPU
    time (0.087 s against 0.0035) and a request at 50 clients up to 5 ms of CPU."""
    from threadpoolctl import threadpool_limits  # scikit-learn's dependency

    threadpool_limits(1)


def _token_ok(settings: Settings, request: Request) -> bool:
    if settings.api_token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    expected = settings.api_token.get_secret_value().encode()
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected)


async def _body(request: Request, limit: int) -> DecideIn:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "payload_too_large", f"request body is over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "payload_too_large", f"request body is over {limit} bytes")
    try:
        body = parse_json(b"".join(chunks))  # `json.loads`' value, by orjson
    except (ValueError, RecursionError):  # json's JSONDecodeError and UnicodeDecodeError too
        raise ApiError(400, "bad_json", "body is not valid UTF-8 JSON") from None
    refuse_unstorable(body)  # a NUL in a row reached the decision log's insert: a 500
    try:
        return DecideIn.model_validate(body)
    except ValidationError as exc:
        raise validation_error(list(exc.errors()), body=body) from None


async def decide(request: Request) -> Response:
    service: DecideService = request.app.state.decide
    if not _token_ok(service.settings, request):
        raise ApiError(401, "unauthorized", "missing or wrong token: send `Authorization: Bearer`")
    body = await _body(request, service.settings.max_body_bytes)
    name, version = parse_ref(body.controller, body.version)
    rows = [DecideRow(r.state, list(r.tools)) for r in body.rows]
    try:
        answered = await service.dispatcher.decide(name, version, rows)
        routing, controller, decisions = answered.routing, answered.controller, answered.decisions
        shadow: list[str | None] | None = None
        if decisions is None:  # a shadow: both at once, the call waits for the slower
            shadowed, live = routing.shadow, controller
            assert shadowed is not None

            async def beside() -> None:
                nonlocal shadow
                shadow = await anyio.to_thread.run_sync(service.shadow_actions, shadowed, rows)

            async with anyio.create_task_group() as group:
                group.start_soon(beside)
                decisions = await anyio.to_thread.run_sync(live.decide, rows)
    except RowError as exc:
        raise ApiError(
            422, "validation_error", str(exc), [{"field": exc.field, "message": str(exc)}]
        ) from None
    assert decisions is not None
    ids: list[str | None] = [None] * len(rows)
    if routing.log:
        ids = list(await anyio.to_thread.run_sync(service.log, routing, rows, decisions, shadow))
    # `DecideOut`'s fields as its `model_dump` writes them, built directly (no model a call).
    row = routing.version
    out: dict[str, Any] = {
        "controller": row.name,
        "version": row.version,
        "trainer": controller.trainer,
        "model_hash": controller.model_hash,
        "decisions": [
            {
                "action": d.action,
                "scores": d.scores,
                "margin": d.margin,
                "abstain": d.abstain,
                "decision_id": i,
            }
            for d, i in zip(decisions, ids, strict=True)
        ],
    }
    if controller.note:  # a qlora: it decides, and says it is slow
        out["note"] = controller.note
    # orjson's text: the same JSON as `JSONResponse`'s (compact, UTF-8), in a tenth the time.
    return Response(orjson.dumps(out), media_type="application/json")


async def healthz(request: Request) -> JSONResponse:
    service: DecideService = request.app.state.decide
    loaded = [{"name": n, "version": v} for n, v in service.versions.loaded()]
    return JSONResponse({"status": "ok", "loaded": loaded})


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unreachable: %s", type(exc).__name__)
    body = error_body("unavailable", "the registry's database is not answering; try again")
    return JSONResponse(body, status_code=503, headers={"Retry-After": "2"})


async def _keep_warm(service: DecideService) -> None:
    pruned_at = time.monotonic()
    while True:
        await asyncio.sleep(POLL_S)
        try:
            await anyio.to_thread.run_sync(service.warm)
        except Exception as exc:  # the next poll tries again; calls resolve on their own
            log.warning("warming the live versions failed: %s", exc)
        if time.monotonic() - pruned_at >= PRUNE_S:
            pruned_at = time.monotonic()
            keep = service.settings.decision_log_keep
            try:
                gone = await anyio.to_thread.run_sync(prune, service.engine, keep)
            except Exception as exc:  # trimmed at the next turn
                log.warning("trimming the decision log failed: %s", exc)
            else:
                if gone:
                    log.info("decision log: %d rows beyond %d per controller deleted", gone, keep)


def create_app(settings: Settings | None = None) -> Starlette:
    service = DecideService(settings or get_settings())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        check_migrated(service.engine)
        await anyio.to_thread.run_sync(service.start)
        app.state.decide = service
        warm = asyncio.create_task(_keep_warm(service))
        try:
            # What is loaded by now (the libraries, the live versions) is kept out of the
            # collector's full passes (core/heap.py: up to 132 ms a pass at 50 clients, their
            # p99; under 1 ms frozen).
            with frozen_heap():
                yield
        finally:
            warm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await warm

    handlers: dict[Any, Any] = {
        ApiError: _api_error,
        sa.exc.OperationalError: _database_down,
        sa.exc.InterfaceError: _database_down,
    }
    return Starlette(
        routes=[Route("/decide", decide, methods=["POST"]), Route("/healthz", healthz)],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
