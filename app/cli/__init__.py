"""`trm`: the command line. Each verb group lives in its own module with a `register` function."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.cli import corpus, db, envs, importspec, runs, server

VERB_MODULES = (server, db, runs, corpus, envs, importspec)


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
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
