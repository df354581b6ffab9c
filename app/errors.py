"""The API's exception handlers: every error leaves as the uniform body of `core.errors`, a 422
naming the field, a 503 when the database does not answer, a 500 that names only the type."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import HTTP_CODES, ApiError, error_body, validation_error

log = logging.getLogger("trm.api")


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_req: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        err = validation_error(list(exc.errors()))
        return JSONResponse(error_body(err.code, err.message, err.details), status_code=422)

    @app.exception_handler(ValidationError)
    async def _pydantic(_req: Request, exc: ValidationError) -> JSONResponse:
        err = validation_error(list(exc.errors()))
        return JSONResponse(error_body(err.code, err.message, err.details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, "error")
        return JSONResponse(
            error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
        )

    async def _database_down(req: Request, exc: Exception) -> JSONResponse:
        if _database_full(exc):
            return _disk_full(req, "the database's disk", None)
        log.warning("database unreachable: %s", type(exc).__name__)
        return JSONResponse(
            error_body(
                "unavailable",
                "the database is not answering; the request was not applied, try again shortly "
                "(a POST /runs with the same Idempotency-Key is safe to repeat)",
                {"retry_after_s": 2},
            ),
            status_code=503,
            headers={"Retry-After": "2"},
        )

    for klass in (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError):
        app.add_exception_handler(klass, _database_down)

    @app.exception_handler(OSError)
    async def _os_error(req: Request, exc: OSError) -> JSONResponse:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return _disk_full(req, "RUNS_DIR's disk", exc.filename)
        if exc.errno == errno.ENAMETOOLONG:  # a client's path that no filesystem takes
            message = (
                "a path in this request is too long (a name over 255 bytes or a path over "
                "4096 bytes); nothing was applied"
            )
            return JSONResponse(
                error_body("validation_error", message, [{"field": "path", "message": message}]),
                status_code=422,
            )
        return await _unexpected(req, exc)

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(
            error_body("internal", f"internal error: {type(exc).__name__}"), status_code=500
        )


def _database_full(exc: Exception) -> bool:
    """SQLite's "database or disk is full", or Postgres's disk_full (SQLSTATE 53100)."""
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state == "53100" or "database or disk is full" in str(orig)


def _disk_full(req: Request, which: str, filename: object) -> JSONResponse:
    """507: the request was not applied because a disk is full; says which."""
    settings = req.app.state.trm.settings
    if filename is None and which.startswith("the database"):
        url = sa.engine.make_url(settings.database_url)  # never its password
        sqlite = url.get_backend_name() == "sqlite" and url.database
        place = str(Path(str(url.database)).parent) if sqlite else f"{url.host}:{url.port}"
    else:
        place = str(filename or settings.runs_dir)
    log.error("disk full: %s (%s)", which, place)
    return JSONResponse(
        error_body(
            "disk_full",
            f"{which} is full ({place}); the request was not applied. Free space there "
            "(GET /readyz shows the free bytes) and try again",
            {"disk": which, "path": place},
        ),
        status_code=507,
    )
