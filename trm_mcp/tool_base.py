"""What every tool module builds on: the `Tool` record, the compact JSON answers are written
in, and the pieces of input schema the tools share (an object, a run id, `full`, a controller's
name)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from trm_mcp.api import Api

Handler = Callable[[Api, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    handler: Handler


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


RUN_ID = {"type": "string", "description": "a run id"}
FULL = {"type": "boolean", "description": "true: the whole answer"}
NAME = {"type": "string"}  # a controller's name (list_controllers)


def short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else compact(value)
    return text if len(text) <= limit else text[:limit] + "..."


def untitled(schema: Any) -> Any:
    """A pydantic schema without its `title`s (the names say the same), to keep it short."""
    if isinstance(schema, dict):
        return {k: untitled(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [untitled(v) for v in schema]
    return schema
