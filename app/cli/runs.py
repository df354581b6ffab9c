"""`trm submit | runs | show | cancel | watch | artifact`: the API from a terminal."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.client import DEFAULT_URL, ApiCallError, Client
from core.card import Card, printable, printable_lines, render_text
from core.paths import resolve_spec_file_path, spec_path_fields

TERMINAL = ("completed", "failed", "cancelled")


def add_url(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        default=None,
        help="the API's address (default: $TRM_URL, else $TRM_API_URL, else " + DEFAULT_URL + ")",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="submit a run spec (JSON file)")
    p.add_argument("file", type=Path, help="the run spec, a JSON file (specs/ has samples)")
    p.add_argument(
        "--idempotency-key",
        default=None,
        help="the same key and spec give the same run, never a second one (default: none)",
    )
    p.add_argument(
        "--watch", action="store_true", help="then follow its card until it ends (default: off)"
    )
    add_url(p)
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("runs", help="list runs, newest first")
    p.add_argument(
        "--kind", help="only this kind: train, bench, hillclimb, selftest (default: all)"
    )
    p.add_argument(
        "--status",
        help="only this status: queued, running, completed, failed, cancelled (default: all)",
    )
    p.add_argument("--parent", help="only the children of this run id (default: all)")
    p.add_argument("--limit", type=int, default=20, help="at most this many (default: 20)")
    add_url(p)
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser("show", help="one run: card, stages, failure")
    p.add_argument("run", help="the run id")
    p.add_argument(
        "--json", action="store_true", help="print the run as the API's JSON (default: text)"
    )
    add_url(p)
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("cancel", help="cancel a run")
    p.add_argument("run", help="the run id")
    add_url(p)
    p.set_defaults(func=cmd_cancel)
    p = sub.add_parser("watch", help="follow a run's card live (SSE)")
    p.add_argument("run", help="the run id")
    p.add_argument(
        "--once", action="store_true", help="print the card once and exit (default: follow)"
    )
    add_url(p)
    p.set_defaults(func=cmd_watch)
    p = sub.add_parser("artifact", help="a run's files: the list, or one file")
    p.add_argument("run", help="the run id")
    p.add_argument("path", nargs="?", help="e.g. scorecard.json (default: list the files)")
    add_url(p)
    p.set_defaults(func=cmd_artifact)


def _fail(exc: Exception) -> int:
    print(f"trm: {printable(str(exc))}", file=sys.stderr)
    if isinstance(exc, ApiCallError) and isinstance(exc.details, list):
        for item in exc.details:
            if isinstance(item, dict) and "field" in item:
                line = f"  {item['field']}: {item.get('message')}"
                print(printable(line), file=sys.stderr)
    return 1


def load_spec(path: Path) -> dict[str, Any]:
    """Read a spec file; a relative data path that exists next to the file resolves against the
    file's folder; any other relative path is left for the server (against its TRM_DATA_DIR)."""
    try:
        spec = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"trm: {path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(
            f"trm: {path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"
        ) from None
    if isinstance(spec, dict):
        for _field, container, key in spec_path_fields(spec):
            local = resolve_spec_file_path(container[key], path)
            if Path(local).exists():
                container[key] = local
    return spec


def cmd_submit(args: argparse.Namespace) -> int:
    client = Client(args.url)
    try:
        run = client.submit(load_spec(args.file), args.idempotency_key)
    except (ApiCallError, OSError) as exc:
        return _fail(exc)
    print(printable(f"{run['id']}  {run['kind']}  {run['status']}"))
    return _watch(client, run["id"]) if args.watch else 0


def cmd_runs(args: argparse.Namespace) -> int:
    try:
        page = Client(args.url).runs(
            kind=args.kind, status=args.status, parent=args.parent, limit=args.limit
        )
    except ApiCallError as exc:
        return _fail(exc)
    print(f"{'RUN':26}  {'KIND':9}  {'STATUS':11}  {'PHASE':16}  {'%':>5}  CREATED")
    for run in page["runs"]:
        line = (
            f"{run['id']:26}  {run['kind']:9}  {run['status']:11}  {(run['phase'] or '-'):16}  "
            f"{run['percent']:5.1f}  {run['created_at'][:19]}"
        )
        print(printable(line))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    client = Client(args.url)
    try:
        run = client.run(args.run)
    except ApiCallError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(run, indent=2))
        return 0
    # Everything printed goes through `printable`: reasons and names come from clients.
    print(printable_lines(client.card_text(args.run)), end="")
    print(
        printable(
            f"status {run['status']}  attempt {run['attempt']}/{run['max_attempts']}"
            + (f"  stopped by {run['stopped_by']}" if run["stopped_by"] else "")
        )
    )
    if run["failure_class"]:
        print(printable(f"failure {run['failure_class']}: {run['failure_reason']}"))
    for stage in run.get("stages") or []:
        error = (stage.get("manifest") or {}).get("error") or {}
        extra = f"  {error.get('class')}: {error.get('message')}" if error else ""
        print(printable(f"  {stage['position']}. {stage['name']:16} {stage['status']:10}{extra}"))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    try:
        run = Client(args.url).cancel(args.run)
    except ApiCallError as exc:
        return _fail(exc)
    note = " (cancel requested; the worker stops it)" if run["status"] == "running" else ""
    print(printable(f"{run['id']}  {run['status']}{note}"))
    return 0


def cmd_artifact(args: argparse.Namespace) -> int:
    try:
        found = Client(args.url).artifact(args.run, args.path)
    except ApiCallError as exc:
        return _fail(exc)
    if args.path and sys.stdout.isatty():  # a file's escape codes must not drive the terminal
        print(printable_lines(found.decode("utf-8", errors="replace")), end="")
    elif args.path:
        sys.stdout.buffer.write(found)
    if args.path:
        return 0
    for item in found["artifacts"]:
        print(printable(f"{item['bytes']:>12}  {item['path']}"))
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    client = Client(args.url)
    if args.once:
        try:
            print(printable_lines(client.card_text(args.run)), end="")
        except ApiCallError as exc:
            return _fail(exc)
        return 0
    return _watch(client, args.run)


def _watch(client: Client, run_id: str) -> int:
    """Redraw the card in place on every card event; exit 0 when the run completes."""
    drawn = 0
    status = None
    try:
        print(printable_lines(client.card_text(run_id)), end="")
        drawn = len(render_text(Card(run_id=run_id, kind="-")).splitlines())
        for event in client.events(run_id):
            if event["type"] == "card":
                card = Card(**{k: v for k, v in event["data"].items() if k in Card.model_fields})
                text = render_text(card)
                sys.stdout.write(f"\x1b[{drawn}F" if drawn and sys.stdout.isatty() else "")
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
                drawn = len(text.splitlines())
            elif event["type"] == "status":
                status = event["data"].get("status")
    except ApiCallError as exc:
        return _fail(exc)
    except KeyboardInterrupt:
        return 130
    if status:
        reason = ""
        run = client.run(run_id)
        if run.get("failure_reason"):
            reason = f": {run['failure_class']}: {run['failure_reason']}"
        print(printable(f"run {run_id} {status}{reason}"))
    return 0 if status == "completed" else 1
