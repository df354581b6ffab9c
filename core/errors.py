"""The uniform error body (SPEC §10): {"error": {"code", "message", "details"}}, and `ApiError`,
which carries one. Plain Python: the worker raises and reads these too; the API's handlers that
turn exceptions into responses are `app/errors.py`."""

from __future__ import annotations

from typing import Any

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
