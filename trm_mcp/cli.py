"""`trm mcp`: the verb (registered by app/cli like every other verb group)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="an MCP server over the API for agents such as Hermes (stdio; --http to serve)",
        description="Serves the API's tools over MCP. Talks to TRM_URL (or TRM_API_URL) with "
        "TRM_API_TOKEN; see docs/hermes.md.",
    )
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp, not stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --http (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="with --http (default: 8765)")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="with --http: a name clients reach this server by (repeatable). Requests whose "
        "Host or Origin is not a loopback name, the bind address or one of these are refused. "
        "Beyond loopback TRM_API_TOKEN must be set: every caller sends it as a bearer token. "
        "(default: none, so loopback names and the bind address only).",
    )
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    # The SDK loads only when the verb runs, so that every other verb starts as fast as before.
    from trm_mcp import server

    if args.http:
        try:
            server.run_http(args.host, args.port, args.allow_host)
        except server.HttpRefused as refused:
            print(f"trm mcp: {refused}", file=sys.stderr)
            return 2
    else:
        import anyio

        anyio.run(server.run_stdio)
    return 0
