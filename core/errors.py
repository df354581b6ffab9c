"""The uniform error body (SPEC §10): {"error": {"code", "message", "details"}}."""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("trm.api")

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    501: "not_implemented",
    503: "unavailable",
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """('body', 'corpus', 'sources', 0, 'path') -> 'corpus.sources[0].path'."""
    out = ""
    for part in loc:
        if part in ("body", "query", "path", "header") and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "body"


def _without_union_tags(loc: list[Any], body: Any) -> list[Any]:
    """A discriminated union puts its tag ('train', 'jsonl') into the location; it is not a
    field, so drop every part that names the `kind`/`type` of the object it stands in."""
    out: list[Any] = []
    node = body
    for part in loc:
        if part == "body" and not out:
            continue
        if (
            isinstance(node, dict)
            and isinstance(part, str)
            and part not in node
            and part in (node.get("kind"), node.get("type"))
        ):
            continue
        out.append(part)
        if isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return out


def validation_details(errors: list[Any], body: Any = None) -> list[dict[str, Any]]:
    details = []
    for err in errors:
        loc = _without_union_tags(list(err.get("loc", ())), body)
        details.append(
            {"field": field_path(loc), "message": err.get("msg"), "type": err.get("type")}
        )
    return details


def validation_error(errors: list[Any], prefix: str = "", body: Any = None) -> ApiError:
    details = validation_details(errors, body)
    for d in details:
        d["field"] = f"{prefix}{d['field']}" if prefix else d["field"]
    first = details[0] if details else {"field": "body", "message": "invalid"}
    message = f"{first['field']}: {first['message']}"
    if len(details) > 1:
        message += f" (and {len(details) - 1} more)"
    return ApiError(422, "validation_error", message, details)


def install(app: FastAPI) -> None:
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

    async def _database_down(_req: Request, exc: Exception) -> JSONResponse:
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

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(
            error_body("internal", f"internal error: {type(exc).__name__}"), status_code=500
        )
