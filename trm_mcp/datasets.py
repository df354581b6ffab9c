"""The `datasets` tool: list, show, delete and push data sets (docs/datasets.md). `push` packs a
folder or file on this MCP server's host (core/dataset_pack.py, as `trm data push` does) and
streams it to `PUT /datasets/{name}`; inside the API (its /mcp) it refuses, since a path there is
the API host's, past TRM_DATA_DIR."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from core.dataset_pack import pack
from trm_mcp.api import Api, ApiFailure

READ_S = 280  # an upload's answer (unpacked and shown) must come within Hermes's 300 s a call
DATASETS = (
    "Data sets (folders of logs) to train on: action list, show (rows, families, sources), "
    "delete, or push path (a folder or .jsonl/.tar.gz/.zip on this MCP server's host; over "
    'stdio, the agent\'s) as name. A train source then names {"dataset": name}.'
)


def datasets_schema(full: dict[str, Any]) -> dict[str, Any]:
    properties = {
        "action": {"enum": list(DATASET_ACTIONS)},
        "name": {"type": "string"},
        "path": {"type": "string"},
        "replace": {"type": "boolean"},
        "full": full,
    }
    return {
        "type": "object",
        "properties": properties,
        "required": ["action"],
        "additionalProperties": False,
    }


DATASET_ACTIONS = ("list", "show", "push", "delete")
NOT_HERE = (
    "push reads a path on the MCP server's host, and this MCP server runs inside the API (its "
    "/mcp), where that would read the API host's files past TRM_DATA_DIR: run `trm mcp` on the "
    "machine that holds the logs (stdio, or --http), or `trm data push DIR --name N` there"
)


def _refusal(field: str, message: str, status: int = 422) -> ApiFailure:
    details = [{"field": field, "message": message}]
    error = {"code": "validation_error", "message": f"{field}: {message}", "details": details}
    return ApiFailure(status, {"error": error, "status": status})


async def datasets(api: Api, args: dict[str, Any]) -> Any:
    action, name = args.get("action"), args.get("name")
    if action not in DATASET_ACTIONS:
        raise _refusal("action", f"one of {', '.join(DATASET_ACTIONS)}")
    if action == "list":
        page = await api.json("GET", "/datasets")
        keep = ("name", "files", "unpacked_bytes", "created_at")
        return page if args.get("full") else [{k: d[k] for k in keep} for d in page["datasets"]]
    if not name:
        raise _refusal("name", f"required for {action}")
    where = f"/datasets/{quote(str(name), safe='')}"
    if action == "show":
        view = await api.json("GET", where)
        return view if args.get("full") else _dataset_view(view)
    if action == "delete":
        return await api.json("DELETE", where)
    if not args.get("path"):
        raise _refusal("path", "required for push: a folder or .jsonl/.tar.gz/.zip file")
    if not api.local_files:
        raise _refusal("path", NOT_HERE, 400)
    with tempfile.TemporaryDirectory(prefix="trm-mcp-push-") as scratch:
        try:
            packed = await asyncio.to_thread(pack, Path(str(args["path"])), Path(scratch))
        except (OSError, ValueError) as exc:
            raise _refusal("path", str(exc)) from None
        replace = "true" if args.get("replace") else None
        response = await api.call(
            "PUT",
            where,
            content=_chunks(packed.file),
            params={"replace": replace, "filename": packed.filename},
            headers={"X-Content-SHA256": packed.sha256, "Content-Type": packed.content_type},
            timeout=httpx.Timeout(30, write=None, read=READ_S),
        )
    answer = response.json()
    out = {"dataset": answer["dataset"], "replaced": answer["replaced"]}
    return out | {"left_out": packed.left_out[:20], "show": _dataset_view(answer["show"])}


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        while chunk := await asyncio.to_thread(fh.read, 1 << 20):
            yield chunk


def _dataset_view(view: dict[str, Any]) -> dict[str, Any]:
    """Compact: the sources a train spec can name, rows, families, worlds, the first malformed
    lines; the per-file table only with `full`."""
    sources = [
        {k: v for k, v in s.items() if v is not None and k != "files"} for s in view["sources"]
    ]
    keep = ("rows", "files_total", "families", "worlds", "malformed_total", "complete", "note")
    return {"sources": sources, **{k: view[k] for k in keep}, "malformed": view["malformed"][:5]}
