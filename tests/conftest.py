"""Shared fixtures: real SQLite and Postgres databases, a real Redis, real API and worker
processes. Nothing of ours is mocked."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.db import upgrade
from core.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("TRM_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
PG_ADMIN_URL = os.environ.get("TRM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TERMINAL = ("completed", "failed", "cancelled")


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """`asyncio.run` in a thread of its own: a fixture of another test (the dashboard's browser)
    may leave an event loop running in the main thread, where `asyncio.run` refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/trm.db"
        return
    name = f"trm_t_{uuid.uuid4().hex[:12]}"
    _pg_admin(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    _pg_admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
    _pg_admin(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of every process of one test's service (API, workers, children)."""
    return {
        "TRM_DATABASE_URL": database_url,
        "TRM_REDIS_URL": REDIS_URL,
        "TRM_REDIS_NAMESPACE": f"t{uuid.uuid4().hex[:10]}",
        "TRM_RUNS_DIR": str(tmp_path / "runs"),
        "TRM_DATA_DIR": str(tmp_path / "data"),
        "TRM_MODEL_CACHE": str(tmp_path / "models"),
        "TRM_HEARTBEAT_S": "0.5",
        "TRM_STALE_AFTER_S": "3",
        "TRM_RECONCILE_EVERY_S": "0.5",
        "TRM_REQUEUE_AFTER_S": "1",
        "TRM_CANCEL_GRACE_S": "3",
        "TRM_SSE_KEEPALIVE_S": "1",
    }


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return Settings(**{k[4:].lower(): v for k, v in env.items()})  # type: ignore[arg-type]


@pytest.fixture
def migrated(settings: Settings) -> Settings:
    upgrade(settings.database_url)
    return settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """Real processes: `python -m app.cli serve` and `python -m app.cli worker`."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: dict[str, subprocess.Popen[bytes]] = {}  # started with a worker id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def _spawn(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> Any:
        log = open(self.logs / f"{name}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            env={**self.env, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.procs.append(proc)
        return proc

    def start_api(self) -> subprocess.Popen[bytes]:
        proc = self._spawn("api", "serve", "--port", str(self.port))
        wait_for(lambda: self._healthy(), timeout=30, what="the API to answer /healthz")
        return proc  # type: ignore[no-any-return]

    def _healthy(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def start_worker(self, worker_id: str | None = None) -> subprocess.Popen[bytes]:
        extra = {"TRM_WORKER_ID": worker_id} if worker_id else {}
        proc = self._spawn("worker", "worker", "--queues", "gpu,cpu", extra_env=extra)
        if worker_id:
            self.workers[worker_id] = proc
        return proc  # type: ignore[no-any-return]

    def kill_worker_holding(self, run_id: str) -> str:
        """kill -9 the (named) worker that holds the run now; its id."""
        holder = str(self.run(run_id)["worker_id"])
        victim = self.workers[holder]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        return holder

    def ledger(self, run_id: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/runs/{run_id}/ledger")
        assert response.status_code == 200, response.text
        return list(response.json()["entries"])

    def submit(self, spec: dict[str, Any], **headers: str) -> dict[str, Any]:
        response = self.http.post("/runs", json=spec, headers=headers)
        assert response.status_code == 202, response.text
        return response.json()  # type: ignore[no-any-return]

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/runs/{run_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def wait_status(self, run_id: str, *statuses: str, timeout: float = 60) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def check() -> bool:
            found.update(self.run(run_id))
            return found["status"] in statuses

        wait_for(
            check,
            timeout=timeout,
            what=f"run {run_id} to reach {statuses}",
            detail=lambda: f"last seen {found.get('status')}; logs in {self.logs}",
        )
        return found

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(timeout=10)
        self.http.close()


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.1,
    detail: Callable[[], str] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    extra = f" ({detail()})" if detail else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")


@pytest.fixture
def service(env: dict[str, str], migrated: Settings, tmp_path: Path) -> Iterator[Service]:
    logs = tmp_path / "logs"
    logs.mkdir()
    svc = Service(env, logs)
    svc.start_api()
    yield svc
    svc.stop()


class TcpProxy:
    """127.0.0.1:port -> target. `cut()` closes the listener and every open connection (the
    server is unreachable: connects are refused); `restore()` listens again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
