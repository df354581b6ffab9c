"""The controller tools: list, promote, decide with, report outcomes to, read the decisions of
and shadow a promoted controller (the API's /controllers)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from core.controllers import MAX_ROWS, DecideRowIn
from core.decisions import MAX_NOTES, MAX_OUTCOMES, MAX_PAGE
from trm_mcp.api import Api
from trm_mcp.tool_base import FULL, NAME, RUN_ID, Tool, obj, short, untitled


def _controller_path(name: str, tail: str = "") -> str:
    return f"/controllers/{quote(name, safe='')}{tail}"


async def list_controllers(api: Api, args: dict[str, Any]) -> Any:
    name = args.get("name")
    return await api.json("GET", _controller_path(name) if name else "/controllers")


async def promote(api: Api, args: dict[str, Any]) -> Any:
    body = {k: args[k] for k in ("name", "run_id", "abstain_margin") if args.get(k) is not None}
    return await api.json("POST", "/controllers", json_body=body)


async def decide(api: Api, args: dict[str, Any]) -> Any:
    body = {"rows": args["rows"], "version": args.get("version")}
    return await api.json("POST", _controller_path(args["name"], "/decide"), json_body=body)


def decide_schema() -> dict[str, Any]:
    row = untitled(DecideRowIn.model_json_schema())
    row["description"] = 'e.g. {"state": "<the state as text>", "tools": ["a", "b"]}'
    return obj(
        {
            "name": NAME,
            "rows": {"type": "array", "items": row, "minItems": 1, "maxItems": MAX_ROWS},
            "version": {"type": "integer", "minimum": 1, "description": "default: live"},
        },
        ("name", "rows"),
    )


async def report_outcomes(api: Api, args: dict[str, Any]) -> Any:
    body = {"outcomes": args["outcomes"]}
    return await api.json("POST", _controller_path(args["name"], "/outcomes"), json_body=body)


async def list_decisions(api: Api, args: dict[str, Any]) -> Any:
    """Newest first; compact: a decision's id, version, action, margin, abstain, its state cut
    short, the shadow's action when one ran, and its outcome (unless `full`)."""
    params = {"limit": args.get("limit", 20), "before": args.get("before")}
    if args.get("with_outcomes") is not None:
        params["with_outcomes"] = "true" if args["with_outcomes"] else "false"
    page = await api.json("GET", _controller_path(args["name"], "/decisions"), params=params)
    if args.get("full"):
        return page
    return {
        "decisions": [_decision(d) for d in page["decisions"]],
        "next_before": page.get("next_before"),
    }


def _decision(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: d[k] for k in ("id", "version", "action", "abstain")}
    out["margin"], out["state"] = round(d["margin"], 4), short(d["state"], 80)
    if d.get("shadow_version") is not None:
        out["shadow"] = {"version": d["shadow_version"], "action": d["shadow_action"]}
    outcome = d.get("outcome")
    out["outcome"] = outcome and {
        k: outcome[k] for k in ("success", "reward") if outcome[k] is not None
    }
    return out


async def set_shadow(api: Api, args: dict[str, Any]) -> Any:
    body = {"version": args.get("version")}
    return await api.json("POST", _controller_path(args["name"], "/shadow"), json_body=body)


def outcomes_schema() -> dict[str, Any]:
    outcome = obj(
        {
            "decision_id": {"type": "string", "description": "from decide's answer"},
            "success": {"type": "boolean"},
            "reward": {"type": "number"},
            "notes": {"type": "string", "maxLength": MAX_NOTES},
        },
        ("decision_id", "success"),
    )
    return obj(
        {
            "name": NAME,
            "outcomes": {
                "type": "array",
                "items": outcome,
                "minItems": 1,
                "maxItems": MAX_OUTCOMES,
            },
        },
        ("name", "outcomes"),
    )


def controller_tools() -> list[Tool]:
    return [
        Tool(
            "list_controllers",
            "Promoted controllers and their live versions; name=X: its versions.",
            obj({"name": {"type": "string"}}),
            list_controllers,
        ),
        Tool(
            "promote",
            "Make a completed train run (a hill-climb's best, a bench's trained "
            "router) the name's live version.",
            obj(
                {
                    "name": {"type": "string"},
                    "run_id": RUN_ID,
                    "abstain_margin": {"type": "number", "minimum": 0, "maximum": 1},
                },
                ("name", "run_id"),
            ),
            promote,
        ),
        Tool(
            "decide",
            "Ask a promoted controller which tool to take for each row: action, "
            "probabilities, margin, abstain.",
            decide_schema(),
            decide,
        ),
        Tool(
            "report_outcomes",
            "Report how decisions went (a logging controller's "
            "decision_id); a later report replaces an earlier one.",
            outcomes_schema(),
            report_outcomes,
        ),
        Tool(
            "list_decisions",
            "A controller's logged decisions and outcomes, newest first "
            "(before=<next_before> pages back).",
            obj(
                {
                    "name": NAME,
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                    "before": {"type": "string"},
                    "with_outcomes": {"type": "boolean"},
                    "full": FULL,
                },
                ("name",),
            ),
            list_decisions,
        ),
        Tool(
            "set_shadow",
            "Run version beside the live one (never changes answers; "
            "list_controllers shows agreement); version=null stops it.",
            obj(
                {"name": NAME, "version": {"type": ["integer", "null"], "minimum": 1}},
                ("name", "version"),
            ),
            set_shadow,
        ),
    ]
