"""`trm promote | controllers | rollback | decide`: named controllers from a terminal (SPEC §12);
`trm decisions | outcomes | shadow`: their decision log, the outcomes reported for it and a
shadow version; and `trm decide-server`, the decision process the API forwards decisions to."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from app.cli.runs import _fail, add_url
from app.cli.server import add_fd
from app.client import ApiCallError, Client
from core.card import printable
from core.settings import Settings

if TYPE_CHECKING:
    from starlette.types import ASGIApp


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("promote", help="promote a completed train run (or a hill-climb's best)")
    p.add_argument("run", help="a completed train run id, or a completed hill-climb's id")
    p.add_argument(
        "--as", dest="name", required=True, help="the name: lowercase letters, digits, - and _"
    )
    p.add_argument(
        "--abstain-margin",
        type=float,
        default=None,
        help="abstain when the best probability leads the next by less (0..1; default: never)",
    )
    p.add_argument(
        "--log-decisions",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record every decided row for outcomes (default: as the name was; off when new)",
    )
    add_url(p)
    p.set_defaults(func=cmd_promote)
    p = sub.add_parser("controllers", help="list controllers, or show one's versions")
    p.add_argument("name", nargs="?", help="a controller's name (default: list them all)")
    p.add_argument("--json", action="store_true", help="print the API's JSON (default: text)")
    add_url(p)
    p.set_defaults(func=cmd_controllers)
    p = sub.add_parser("rollback", help="make an earlier version of a controller live again")
    p.add_argument("name", help="the controller's name")
    p.add_argument("version", type=int, help="the version to make live")
    add_url(p)
    p.set_defaults(func=cmd_rollback)
    p = sub.add_parser("decide", help="ask a controller for decisions")
    p.add_argument("name", help="the controller's name (its live version decides)")
    p.add_argument("--version", type=int, default=None, help="this version (default: the live one)")
    p.add_argument(
        "--state", help="one row's state, text or a JSON object as text (default: none; or --rows)"
    )
    p.add_argument(
        "--tools", help="one row's candidate tools, comma-separated (default: none; or --rows)"
    )
    p.add_argument(
        "--rows",
        type=Path,
        help="a JSONL file of {state, tools} rows instead of --state/--tools (default: none)",
    )
    add_url(p)
    p.set_defaults(func=cmd_decide)
    p = sub.add_parser("decisions", help="a controller's logged decisions, newest first")
    p.add_argument("name", help="the controller's name")
    p.add_argument("--limit", type=int, default=20, help="how many (default: 20, at most 500)")
    p.add_argument("--before", default=None, help="older than this decision id (default: newest)")
    p.add_argument(
        "--with-outcomes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only those with (--with-outcomes) or without (--no-with-outcomes) one (default: all)",
    )
    p.add_argument("--json", action="store_true", help="print the API's JSON (default: text)")
    add_url(p)
    p.set_defaults(func=cmd_decisions)
    p = sub.add_parser("outcomes", help="report what happened after logged decisions")
    p.add_argument("name", help="the controller's name")
    p.add_argument(
        "--file",
        type=Path,
        help="a JSONL file of {decision_id, success, reward?, notes?} (default: none; or "
        "--decision)",
    )
    p.add_argument("--decision", help="one decision id (default: none; or --file)")
    p.add_argument(
        "--success",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --decision: it succeeded (--success) or failed (--no-success)",
    )
    p.add_argument("--reward", type=float, default=None, help="with --decision (default: none)")
    p.add_argument("--notes", default=None, help="with --decision, short text (default: none)")
    add_url(p)
    p.set_defaults(func=cmd_outcomes)
    p = sub.add_parser("shadow", help="run a version beside the live one, or stop (--clear)")
    p.add_argument("name", help="the controller's name")
    p.add_argument("version", type=int, nargs="?", help="the version to shadow the live one")
    p.add_argument("--clear", action="store_true", help="stop shadowing")
    p.add_argument(
        "--promote",
        action="store_true",
        help="make the shadow live if it meets --min-decisions and --min-agreement",
    )
    p.add_argument("--min-decisions", type=int, default=100, help="with --promote (default: 100)")
    p.add_argument("--min-agreement", type=float, default=0.9, help="with --promote (default: 0.9)")
    add_url(p)
    p.set_defaults(func=cmd_shadow)
    p = sub.add_parser("decide-server", help="the decision process (keeps controllers loaded)")
    p.add_argument(
        "--host", default=None, help="its interface (default: TRM_API_HOST or 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=None, help="its port (default: TRM_DECIDE_PORT)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="decision processes on the one port, each with its own loaded versions "
        "(default: TRM_DECIDE_WORKERS, 1)",
    )
    add_fd(p)
    p.set_defaults(func=cmd_decide_server)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER") or "cli"


def _version_line(v: dict[str, Any]) -> str:
    anchor = "-" if v["anchor_score"] is None else f"{v['anchor_score']:.3f}"
    margin = "-" if v["abstain_margin"] is None else f"{v['abstain_margin']:g}"
    mark = "*" if v["live"] else " "
    return (
        f"{mark} v{v['version']:<4} {v['trainer']:6} anchor {anchor:6} abstain<{margin:5} "
        f"run {v['run_id']}  {v['promoted_at'][:19]}  by {v['promoted_by']}"
    )


def cmd_promote(args: argparse.Namespace) -> int:
    client = Client(args.url)
    body = {
        "name": args.name,
        "run_id": args.run,
        "abstain_margin": args.abstain_margin,
        "by": _user(),
        "log_decisions": args.log_decisions,
    }
    try:
        version = client._json(client.http.post("/controllers", json=body))
    except ApiCallError as exc:
        return _fail(exc)
    print(printable(f"{version['name']} version {version['version']} is live"))
    print(printable(_version_line(version)))
    return 0


def cmd_controllers(args: argparse.Namespace) -> int:
    client = Client(args.url)
    try:
        path = f"/controllers/{args.name}" if args.name else "/controllers"
        answer = client._json(client.http.get(path))
    except ApiCallError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(answer, indent=2))
    elif args.name:
        logging = "  logs decisions" if answer["log_decisions"] else ""
        print(printable(f"{answer['name']}  live v{answer['live_version']}{logging}"))
        print(printable(f"  anchors: {answer['live']['anchors']}"))
        if answer["shadow"]:
            print(printable(_shadow_line(answer["shadow"])))
        for v in reversed(answer["versions"]):
            print(printable(_version_line(v)))
    else:
        print(f"{'NAME':24}  {'LIVE':>4}  {'VERSIONS':>8}  {'TRAINER':7}  ANCHOR")
        for c in answer["controllers"]:
            anchor = c["live"]["anchor_score"]
            line = (
                f"{c['name']:24}  v{c['live_version']:<3}  {c['versions']:>8}  "
                f"{c['live']['trainer']:7}  {'-' if anchor is None else f'{anchor:.3f}'}"
            )
            print(printable(line))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    client = Client(args.url)
    try:
        answer = client._json(
            client.http.post(f"/controllers/{args.name}/rollback", json={"version": args.version})
        )
    except ApiCallError as exc:
        return _fail(exc)
    print(printable(f"{answer['name']} version {answer['live_version']} is live"))
    return 0


def _jsonl(path: Path, verb: str) -> list[Any]:
    """Every non-blank line of a JSONL file, parsed; exits naming the file and line otherwise."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SystemExit(f"trm {verb}: {path}: {exc.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"trm {verb}: {path}:{n}: not JSON: {exc.msg}") from None
    return out


def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.rows is not None:
        if args.state is not None or args.tools is not None:
            raise SystemExit("trm decide: --rows or --state/--tools, not both")
        rows = _jsonl(args.rows, "decide")
        for row in rows:
            if isinstance(row, dict) and not isinstance(row.get("state"), str | None):
                row["state"] = json.dumps(row["state"])  # a JSON state is sent as its text
        return rows
    if args.state is None or args.tools is None:
        raise SystemExit("trm decide: give --state and --tools, or --rows FILE.jsonl")
    return [{"state": args.state, "tools": [t.strip() for t in args.tools.split(",")]}]


def cmd_decide(args: argparse.Namespace) -> int:
    client = Client(args.url)
    body: dict[str, Any] = {"rows": _rows(args)}
    if args.version is not None:
        body["version"] = args.version
    try:
        answer = client._json(client.http.post(f"/controllers/{args.name}/decide", json=body))
    except ApiCallError as exc:
        return _fail(exc)
    if args.rows is not None:
        for d in answer["decisions"]:
            print(json.dumps({**d, "version": answer["version"]}))
        return 0
    d = answer["decisions"][0]
    abstain = "  (abstains)" if d["abstain"] else ""
    print(
        printable(
            f"{d['action']}  margin {d['margin']:.3f}{abstain}  "
            f"{answer['controller']} v{answer['version']}"
        )
    )
    tools = body["rows"][0]["tools"]
    scores = "  ".join(f"{t} {s:.3f}" for t, s in zip(tools, d["scores"], strict=True))
    print(printable(f"  {scores}"))
    return 0


def cmd_decide_server(args: argparse.Namespace) -> int:
    import uvicorn

    from app.cli.server import _logging, _refuse_unmigrated, bind_args, serve_bound_to
    from core.settings import MAX_DECIDE_WORKERS, get_settings

    _logging()
    settings = get_settings()
    workers = settings.decide_workers if args.workers is None else args.workers
    if not 1 <= workers <= MAX_DECIDE_WORKERS:
        print(
            f"trm decide-server: --workers takes 1 to {MAX_DECIDE_WORKERS} (got {workers})",
            file=sys.stderr,
        )
        return 2
    if _refuse_unmigrated():
        return 2
    host = args.host or settings.api_host
    port = args.port or settings.decide_port
    serve_bound_to(host)  # each process makes its app (`decide_app_from_env`) from it
    print(
        f"trm decide-server: on http://{host}:{port}"
        + (f", {workers} processes" if workers > 1 else ""),
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        "app.cli.controllers:decide_app_from_env",
        factory=True,
        **bind_args(host, port, args.fd),
        workers=workers,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
    )
    return 0


def decide_app_from_env() -> ASGIApp:
    """`decide_app` of this process's settings, bound where TRM_API_HOST says (each process of
    `trm decide-server --workers N` makes its own)."""
    from core.settings import get_settings

    settings = get_settings()
    return decide_app(settings, settings.api_host)


def decide_app(settings: Settings, host: str) -> ASGIApp:
    """The decision process behind the API's browser guard (app/guard.py): `trm up` starts it
    without a token on a loopback port, where a web page could otherwise post a text/plain
    decide call (writing the decision log) or read decisions through a rebound name. The name
    the API calls it by (TRM_DECIDE_URL) is one of its names. With a token on a wider bind the
    token guards it, and TRM_ALLOWED_HOSTS (the API's names, shared in compose) does not turn the
    Host check on: the API calls it by a service name the list need not hold."""
    from app.guard import BrowserGuard, is_loopback
    from worker.decide.server import create_app

    open_api = settings.api_token is None
    called_as = urlsplit(settings.decide_url or "").hostname or ""
    checked = open_api or is_loopback(host)
    allowed = [*settings.allowed_hosts.split(","), called_as] if checked else []
    return BrowserGuard(create_app(settings), bind=host, allowed_hosts=allowed, open_api=open_api)


def _shadow_line(report: dict[str, Any]) -> str:
    rate = report["agreement_rate"]
    line = (
        f"  shadow v{report['version']}: agreed on {report['agreed']} of {report['decisions']}"
        f" ({'-' if rate is None else f'{rate:.3f}'})"
    )
    for side in ("when_agreed", "when_disagreed"):
        split = report[side]
        if split["reported"]:
            line += f"; {side.replace('_', ' ')} {split['succeeded']}/{split['reported']} succeeded"
    return line


def cmd_decisions(args: argparse.Namespace) -> int:
    client = Client(args.url)
    params: dict[str, Any] = {"limit": args.limit}
    if args.before:
        params["before"] = args.before
    if args.with_outcomes is not None:
        params["with_outcomes"] = str(args.with_outcomes).lower()
    try:
        page = client._json(client.http.get(f"/controllers/{args.name}/decisions", params=params))
    except ApiCallError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    for d in page["decisions"]:
        outcome = d["outcome"]
        told = "-" if outcome is None else ("success" if outcome["success"] else "failure")
        shadow = "" if d["shadow_version"] is None else f"  shadow {d['shadow_action']}"
        line = (
            f"{d['id']}  v{d['version']:<3} {d['action']}  margin {d['margin']:.3f}  "
            f"{told}{shadow}  {d['decided_at'][:19]}"
        )
        print(printable(line))
    if page["next_before"]:
        print(printable(f"(older: --before {page['next_before']})"))
    return 0


def _outcome_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.file is not None:
        if args.decision is not None:
            raise SystemExit("trm outcomes: --file or --decision, not both")
        return _jsonl(args.file, "outcomes")
    if args.decision is None or args.success is None:
        raise SystemExit("trm outcomes: give --decision ID and --success/--no-success, or --file")
    row: dict[str, Any] = {"decision_id": args.decision, "success": args.success}
    if args.reward is not None:
        row["reward"] = args.reward
    if args.notes is not None:
        row["notes"] = args.notes
    return [row]


def cmd_outcomes(args: argparse.Namespace) -> int:
    client = Client(args.url)
    body = {"outcomes": _outcome_rows(args)}
    try:
        answer = client._json(client.http.post(f"/controllers/{args.name}/outcomes", json=body))
    except ApiCallError as exc:
        return _fail(exc)
    print(printable(f"{answer['recorded']} outcome(s) recorded ({answer['replaced']} replaced)"))
    return 0


def cmd_shadow(args: argparse.Namespace) -> int:
    client = Client(args.url)
    base = f"/controllers/{args.name}"
    if args.promote:
        body: dict[str, Any] = {
            "min_decisions": args.min_decisions,
            "min_agreement": args.min_agreement,
        }
        call = client.http.post(f"{base}/promote-shadow", json=body)
    elif args.clear or args.version is not None:
        version = None if args.clear else args.version
        call = client.http.post(f"{base}/shadow", json={"version": version})
    else:
        call = client.http.get(base)
    try:
        answer = client._json(call)
    except ApiCallError as exc:
        return _fail(exc)
    print(printable(f"{answer['name']}  live v{answer['live_version']}"))
    if answer["shadow"]:
        print(printable(_shadow_line(answer["shadow"])))
    else:
        print("  no shadow version")
    return 0
