"""The tools: each has a JSON-Schema input and answers compact JSON. Names, descriptions and
schemas are what the agent's model reads every turn, so they stay short: a spec's full schema is
a resource (trm://schemas/run-spec), named here with one example; answers are compact unless
the caller asks for `full`. A start answers `replayed: true` when its key matched an earlier run.
The run tools are here; the controller tools in `trm_mcp.controller_tools`, the pieces both build
on in `trm_mcp.tool_base`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from typing import Any

from core.models import TERMINAL_STATUSES
from trm_mcp.api import Api, ApiFailure
from trm_mcp.controller_tools import controller_tools
from trm_mcp.datasets import DATASETS, datasets, datasets_schema
from trm_mcp.tool_base import FULL, RUN_ID, Tool, compact, obj, short

# Hermes gives each tool call 300 s; an answer after that is lost, so waits stop well before.
WAIT_CAP_S = 280
WAIT_DEFAULT_S = 240
# wait_for_run asks for the run every POLL_FIRST_S at first, then less often, up to POLL_S apart:
# a short run's end is seen within a fraction of a second, a long run costs the API 2 reads a
# second. (Not the run's event stream: inside the API, /mcp's calls go through httpx's ASGI
# transport, which hands back a response only once its body has ended.)
POLL_FIRST_S = 0.1
POLL_S = 0.5
POLL_GROWTH = 1.3
ARTIFACT_CAP = 64 * 1024  # the most one read_artifact call returns
ARTIFACT_PAGE = 8 * 1024  # its default: an agent's context is the budget; it pages with offset
RUN_FIELDS = (
    "id",
    "kind",
    "status",
    "name",
    "dry_run",
    "phase",
    "percent",
    "best_anchor",
    "attempt",
    "failure_class",
    "failure_reason",
    "cancel_requested",
    "created_at",
    "finished_at",
)


def idempotency_key(tool: str, args: dict[str, Any]) -> str:
    """The caller's key; with `rerun`, a fresh one (a new run); else one derived from the
    arguments, so a retried call returns the run it started (and says it was replayed)."""
    given = args.get("idempotency_key")
    if given:
        return str(given)
    if args.get("rerun"):
        return f"mcp-rerun-{uuid.uuid4().hex}"
    same = {k: v for k, v in args.items() if v is not None and k not in ("rerun", "full")}
    payload = json.dumps([tool, same], sort_keys=True)
    return "mcp-" + hashlib.sha256(payload.encode()).hexdigest()[:40]


def brief(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run.get(k) for k in RUN_FIELDS if run.get(k) is not None}


KEY = {
    "type": "string",
    "maxLength": 200,
    "description": "default: from the arguments (a retry gets the same run)",
}
RERUN = {"type": "boolean", "description": "true: a new run"}
SPEC_EXAMPLE = {
    "kind": "bench",
    "bench": "routerbench",
    "router": "<train run id>",
    "baseline": "none",
}


def spec_schema() -> dict[str, Any]:
    spec = {
        "type": "object",
        "description": "a run spec, `kind` train|bench|hillclimb|selftest; schema: resource "
        f"trm://schemas/run-spec; prompts have ready specs. E.g. {compact(SPEC_EXAMPLE)}",
    }
    return obj({"spec": spec, "idempotency_key": KEY, "rerun": RERUN}, ("spec",))


def bench_schema() -> dict[str, Any]:
    ref = {"type": "string", "maxLength": 500}
    return obj(
        {
            "name": {"type": "string", "description": "from list_benches"},
            "router": {**ref, "description": "none, a train run id, or <hillclimb id>:final"},
            "baseline": {**ref, "description": "what it is compared to (same forms)"},
            "data": {"type": "string", "description": "an external bench's data folder"},
            "instances": {"type": "integer", "minimum": 1, "description": "jobshop only"},
            "episodes": {"type": "integer", "minimum": 1},
            "train_sample": {"type": "integer", "minimum": 1},
            "dry_run": {"type": "boolean", "description": "resolve and plan only"},
            "idempotency_key": KEY,
            "rerun": RERUN,
        },
        ("name",),
    )


async def start(
    api: Api,
    tool: str,
    args: dict[str, Any],
    path: str,
    body: Any,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """POST a run with the call's key; the answer says whether the key replayed an earlier run
    (the API's `Idempotent-Replayed`), with that run's creation time and status."""
    key = idempotency_key(tool, args)
    response = await api.call(
        "POST", path, json_body=body, params=params, headers={"Idempotency-Key": key}
    )
    run = response.json()
    out: dict[str, Any] = {"run": brief(run), "idempotency_key": key}
    if response.headers.get("idempotent-replayed") == "true":
        out["replayed"] = True
        out["note"] = (
            f"these arguments already started run {run['id']} at {run['created_at']} "
            f"({run['status']}): this is that run; rerun=true starts a new one"
        )
    else:
        out["replayed"] = False
    out["next"] = next_step(run) if run["status"] in TERMINAL_STATUSES else NEXT_AFTER_START
    if "resolved" in run:
        out["resolved"] = run["resolved"]
    return out


async def submit_run(api: Api, args: dict[str, Any]) -> Any:
    return await start(api, "submit_run", args, "/runs", args["spec"])


async def start_bench(api: Api, args: dict[str, Any]) -> Any:
    fields = ("router", "baseline", "data", "instances", "episodes", "train_sample")
    body = {k: args[k] for k in fields if args.get(k) is not None}
    params = {"dry_run": "true" if args.get("dry_run") else None}
    return await start(api, "start_bench", args, f"/benches/{args['name']}", body, params)


NEXT_AFTER_START = (
    "call wait_for_run with this run id (it blocks up to 280 s; call it again while the run is "
    "not finished)"
)


async def get_run(api: Api, args: dict[str, Any]) -> Any:
    run = await api.json("GET", f"/runs/{args['run_id']}")
    if args.get("full"):
        return run
    stages = [
        {"name": s.get("name"), "status": s.get("status")}
        | ({"error": short(err)} if (err := (s.get("manifest") or {}).get("error")) else {})
        for s in run.get("stages") or []
    ]
    return {**brief(run), "stages": stages, "next": next_step(run)}


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
        # The same arguments return this very run: only a new key makes progress.
        return (
            "cancelled: it produced nothing; to run it again call the tool that started it "
            "with the same arguments and rerun=true"
        )
    if status == "failed":
        return (
            f"failed ({run.get('failure_class')}): {run.get('failure_reason')}; fix what it "
            "names and call again (a changed spec is a new run), or rerun=true to retry as is"
        )
    if run["kind"] == "bench" and not run.get("dry_run"):
        return "completed: read_artifact(run_id, 'scorecard.json') for the scores"
    if run["kind"] == "hillclimb":
        return "completed: get_ledger(run_id) for every candidate, read_artifact for summary.json"
    return "completed: read_artifact(run_id, 'summary.json') for what was made"


async def wait_for_run(api: Api, args: dict[str, Any]) -> Any:
    timeout = min(float(args.get("timeout_s") or WAIT_DEFAULT_S), WAIT_CAP_S)
    deadline = time.monotonic() + timeout
    pause = POLL_FIRST_S
    while True:
        run = await api.json("GET", f"/runs/{args['run_id']}")
        if run["status"] in TERMINAL_STATUSES or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(POLL_S, pause * POLL_GROWTH)
    card = await card_text(api, args["run_id"])
    done = run["status"] in TERMINAL_STATUSES
    return {"run": brief(run), "finished": done, "card": card, "next": next_step(run)}


async def cancel_run(api: Api, args: dict[str, Any]) -> Any:
    run = await api.json("POST", f"/runs/{args['run_id']}/cancel")
    done = run["status"] in TERMINAL_STATUSES
    return {
        "run": brief(run),
        "next": next_step(run) if done else "call wait_for_run until it says cancelled",
    }


async def list_runs(api: Api, args: dict[str, Any]) -> Any:
    params = {k: args.get(k) for k in ("kind", "status", "cursor")}
    page = await api.json("GET", "/runs", params={**params, "limit": args.get("limit", 20)})
    return {"runs": [brief(r) for r in page["runs"]], "next_cursor": page.get("next_cursor")}


async def list_benches(api: Api, args: dict[str, Any]) -> Any:
    menu = await api.json("GET", "/benches")
    if args.get("full"):
        return menu
    benches = menu.get("benches", menu) if isinstance(menu, dict) else menu
    return [
        {"name": b.get("name"), "description": short(str(b.get("description") or ""), 160)}
        for b in benches
        if isinstance(b, dict)
    ]


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
            "GET",
            f"/runs/{run_id}/artifacts/{path}",
            headers={"Range": f"bytes={offset}-{offset + size - 1}"},
        )
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


# A candidate's fields in a compact ledger: the last value each took over its events.
LEDGER_KEEP = (
    "rung",
    "knob_diff",
    "run_id",
    "anchor_score",
    "generalization_gap",
    "decision",
    "reason",
    "reused_from",
)


async def get_ledger(api: Api, args: dict[str, Any]) -> Any:
    page = await api.json("GET", f"/runs/{args['run_id']}/ledger")
    return page if args.get("full") else compact_ledger(page.get("entries") or [])


def compact_ledger(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One line per candidate (its last decision, score and reason) and the search's own events
    (rung moves, the stop), in the ledger's order; every event row with full=true."""
    candidates: dict[str, dict[str, Any]] = {}
    search: list[dict[str, Any]] = []
    for row in entries:
        cid, event = row.get("candidate_id"), row.get("event")
        if event == "rung" or cid == "search":
            keep = ("candidate_id", "event", "rung", "reason")
            search.append({k: row[k] for k in keep if row.get(k) is not None})
            continue
        line = candidates.setdefault(str(cid), {"candidate": cid})
        line["last_event"] = event
        line.update({k: row[k] for k in LEDGER_KEEP if row.get(k) is not None})
    return {"candidates": list(candidates.values()), "search": search, "events": len(entries)}


def tools() -> list[Tool]:
    run_only = obj({"run_id": RUN_ID}, ("run_id",))
    full_only = obj({"full": FULL})
    return [
        Tool(
            "submit_run",
            "Queue a run from a spec. Same arguments again: the same run, "
            "answered with replayed=true.",
            spec_schema(),
            submit_run,
        ),
        Tool(
            "start_bench",
            "Start a bench, e.g. name=routerbench router=<train run id> baseline=none.",
            bench_schema(),
            start_bench,
        ),
        Tool(
            "get_run",
            "A run's status and stages (full=true: the whole run).",
            obj({"run_id": RUN_ID, "full": FULL}, ("run_id",)),
            get_run,
        ),
        Tool("get_card", "A run's status card as text.", run_only, get_card),
        Tool(
            "wait_for_run",
            f"Wait until the run ends or timeout_s (max {WAIT_CAP_S}) passes; "
            "answers the card and what to do next.",
            obj(
                {
                    "run_id": RUN_ID,
                    "timeout_s": {"type": "number", "minimum": 0, "maximum": WAIT_CAP_S},
                },
                ("run_id",),
            ),
            wait_for_run,
        ),
        Tool("cancel_run", "Ask a run to stop.", run_only, cancel_run),
        Tool(
            "list_runs",
            "Recent runs, newest first, e.g. kind=train status=completed.",
            obj(
                {
                    "kind": {"enum": ["train", "bench", "hillclimb", "selftest"]},
                    "status": {"type": "string"},
                    "cursor": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                }
            ),
            list_runs,
        ),
        Tool("list_benches", "The bench menu (full=true: with defaults).", full_only, list_benches),
        Tool(
            "read_artifact",
            f"A page ({ARTIFACT_PAGE // 1024} KiB; max_bytes up to "
            f"{ARTIFACT_CAP // 1024} KiB) of a run's file, e.g. path=scorecard.json; a longer "
            "file ends with its next offset. No path: the file list.",
            obj(
                {
                    "run_id": RUN_ID,
                    "path": {"type": "string"},
                    "max_bytes": {"type": "integer", "minimum": 1, "maximum": ARTIFACT_CAP},
                    "offset": {"type": "integer", "minimum": 0},
                },
                ("run_id",),
            ),
            read_artifact,
        ),
        Tool(
            "get_ledger",
            "A hill-climb's ledger, a line a candidate (full=true: each event).",
            obj({"run_id": RUN_ID, "full": FULL}, ("run_id",)),
            get_ledger,
        ),
        *controller_tools(),
        Tool("datasets", DATASETS, datasets_schema(FULL), datasets),
    ]
