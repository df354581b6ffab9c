"""`trm`: the command line. Each verb group lives in its own module with a `register` function."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import httpx

from app.cli import bench, corpus, db, demo, envs, importspec, runs, schemas, server
from trm_mcp import cli as mcp

VERB_MODULES = (server, db, runs, demo, bench, corpus, envs, importspec, schemas, mcp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trm", description="TRM trainer service")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for module in VERB_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        return 130
    except httpx.TransportError as exc:
        url = os.environ.get("TRM_API_URL") or "http://127.0.0.1:8000"
        print(
            f"trm: cannot reach the API at {url} ({exc}); is `trm up` running? "
            "Point TRM_API_URL at the server.",
            file=sys.stderr,
        )
        return 1
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
