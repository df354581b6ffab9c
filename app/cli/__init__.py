"""`trm`: the command line. Each verb group lives in its own module with a `register` function."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import httpx

from app.cli import (
    bench,
    controllers,
    corpus,
    data,
    db,
    demo,
    envs,
    export,
    importspec,
    runs,
    schemas,
    server,
)
from app.client import api_url
from trm_mcp import cli as mcp

VERB_MODULES = (
    server,
    db,
    runs,
    data,
    controllers,
    demo,
    bench,
    corpus,
    envs,
    export,
    importspec,
    schemas,
    mcp,
)


SETTINGS = """settings (environment, or a .env file in the current folder):
  TRM_URL            the API the client verbs talk to (also read: TRM_API_URL; TRM_URL wins;
                     --url overrides both; default http://127.0.0.1:8000; `trm up` prints it)
  TRM_API_TOKEN      the bearer token the API requires (default: none, an open API)
  TRM_DATABASE_URL   sqlite:///... or postgresql://... (default: sqlite:///./var/trm.db)
  TRM_REDIS_URL      the queue's Redis (default: unset; `trm up`/`trm demo` start a private one)
  TRM_RUNS_DIR       run folders (default: ./var/runs)
  TRM_DATA_DIR       the only folder specs may read data from (default: ./var/data);
                     `trm data push` puts data sets there (under datasets/)
  TRM_MODEL_CACHE    base models (default: ./var/models)
  TRM_DECIDE_URL     the decision process the API forwards decisions to (`trm up` starts one
                     and sets it; default: unset, decide answers 503)
./var is relative to the folder trm is started in."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trm",
        description="TRM trainer service",
        epilog=SETTINGS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        url = api_url(getattr(args, "url", None))
        print(
            f"trm: cannot reach the API at {url} ({exc}); is `trm up` running? "
            "Point TRM_URL (or --url) at the server.",
            file=sys.stderr,
        )
        return 1
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
