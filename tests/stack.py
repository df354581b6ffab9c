"""The real service as processes, for the tests and the benches: a scratch environment (a database,
a Redis namespace, the run, data and model folders), `python -m app.cli serve` and `worker`
started in it, ready when /healthz or /readyz says so, and a teardown that leaves nothing running
and nothing on the servers. Nothing of ours is mocked. No pytest here: the benches use it too."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from core.db import upgrade
from core.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("TRM_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
PG_ADMIN_URL = os.environ.get("TRM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

Process = subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.1,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll `predicate` until it holds: every `interval` at first, then less often (up to
    0.4 s apart), since each poll of a run costs the API and this process CPU that the suite's
    other processes are waiting for."""
    deadline = time.monotonic() + timeout
    pause = interval
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(pause)
        pause = min(max(interval, 0.4), pause * 1.3)
    extra = f" ({detail()})" if detail else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")


def settings_of(env: dict[str, str]) -> Settings:
    """The settings a process started with `env` reads (its `TRM_` variables win)."""
    fields: dict[str, Any] = {k[4:].lower(): v for k, v in env.items() if k.startswith("TRM_")}
    return Settings(**fields)


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql)


def create_database(kind: str, folder: Path, prefix: str = "t") -> str:
    """A fresh, empty database; its URL. `sqlite`: a file in `folder`; `postgres`: a database of
    its own on the server of TRM_TEST_POSTGRES_URL."""
    if kind == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder}/trm.db"
    if kind != "postgres":
        raise ValueError(f"a database is sqlite or postgres, not {kind!r}")
    name = f"trm_{prefix}_{uuid.uuid4().hex[:12]}"
    _pg_admin(f'CREATE DATABASE "{name}"')
    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def drop_database(url: str) -> None:
    """Drop a Postgres database `create_database` made, cutting whoever is still connected (a
    SQLite file goes with its folder)."""
    if url.startswith("postgresql"):
        name = url.rsplit("/", 1)[1]
        assert name.startswith("trm_"), f"not a scratch database: {name}"
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def forget_namespace(redis_url: str, namespace: str) -> None:
    """Delete every Redis key of a service's namespace (its queues, jobs, heartbeats, event
    channels), as a Redis restarted empty would, without touching other services' keys. Best
    effort: a test may have taken Redis down."""
    import redis

    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(redis_url, socket_timeout=5)
        try:
            keys = list(client.scan_iter(match=f"*{namespace}*", count=1000))
            for i in range(0, len(keys), 1000):
                client.delete(*keys[i : i + 1000])
        finally:
            client.close()


class Scratch:
    """A fresh world for one service around its database: a Redis namespace of its own and the
    runs, data and model-cache folders under `root`. `env` is what every process of the service
    reads; `forget()` deletes the namespace's Redis keys, `drop()` the database too."""

    def __init__(
        self,
        root: Path,
        database_url: str,
        *,
        prefix: str = "t",
        redis_url: str = REDIS_URL,
        data_dir: Path | None = None,
        model_cache: Path | None = None,
    ) -> None:
        self.root, self.database_url, self.redis_url = root, database_url, redis_url
        self.namespace = f"{prefix}{uuid.uuid4().hex[:10]}"
        self.env = {
            "TRM_DATABASE_URL": database_url,
            "TRM_REDIS_URL": redis_url,
            "TRM_REDIS_NAMESPACE": self.namespace,
            "TRM_RUNS_DIR": str(root / "runs"),
            "TRM_DATA_DIR": str(data_dir or root / "data"),
            "TRM_MODEL_CACHE": str(model_cache or root / "models"),
        }

    @property
    def settings(self) -> Settings:
        return settings_of(self.env)

    def migrate(self) -> Settings:
        upgrade(self.database_url)
        return self.settings

    def forget(self) -> None:
        """Delete every Redis key of the namespace (best effort: a test may have taken Redis
        down)."""
        forget_namespace(self.redis_url, self.namespace)

    def drop(self) -> None:
        self.forget()
        drop_database(self.database_url)


class Stack:
    """The service's processes: the API (`serve`) and workers (`worker`), started with `env` over
    this process's environment, each logging to its own file under `logs`. `env` may be changed
    between starts (a worker started later sees the change)."""

    def __init__(self, env: dict[str, str], logs: Path, port: int | None = None) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.logs = logs
        self.procs: list[Process] = []
        self.workers: dict[str, Process] = {}  # started with a worker id
        self.api: Process | None = None  # the last one started
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> Settings:
        """What the processes read."""
        return settings_of(self.env)

    def spawn(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> Process:
        """`python -m app.cli *args`, logging to `<logs>/<name>-<n>.log`."""
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}-{len(self.procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", *args],
                env={**self.env, **(extra_env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        self.procs.append(proc)
        return proc

    def start_api(self, processes: int = 1, timeout: float = 30) -> Process:
        """`serve` (`--workers processes`); back when it answers /healthz."""
        args = ["serve", "--port", str(self.port)]
        if processes != 1:
            args += ["--workers", str(processes)]
        self.api = proc = self.spawn("api", *args)
        self.wait_until(self.healthy, timeout, "the API to answer /healthz", [proc])
        return proc

    def start_decider(self, timeout: float = 60) -> str:
        """`decide-server` (the decision process) on a free port; its URL, also set as
        TRM_DECIDE_URL in `env` so that an API started after it forwards there."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        self.env["TRM_DECIDE_URL"] = url
        proc = self.spawn("decide", "decide-server", "--port", str(port))

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        self.wait_until(up, timeout, "the decision process to answer /healthz", [proc])
        return url

    def start_worker(
        self,
        worker_id: str | None = None,
        queues: str = "gpu,cpu",
        extra_env: dict[str, str] | None = None,
    ) -> Process:
        """`worker --queues queues`; a `worker_id` names it in `workers` and in the database."""
        env = {**(extra_env or {}), **({"TRM_WORKER_ID": worker_id} if worker_id else {})}
        proc = self.spawn("worker", "worker", "--queues", queues, extra_env=env)
        if worker_id:
            self.workers[worker_id] = proc
        return proc

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def ready(self, workers: int = 0) -> bool:
        """/readyz: the database and Redis answer, and `workers` workers are heartbeating (asked
        with the API's token when it wants one)."""
        token = self.env.get("TRM_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = httpx.get(f"{self.url}/readyz", headers=headers, timeout=5)
        except httpx.TransportError:
            return False
        alive = response.json()["checks"]["workers"]["alive"] if response.status_code == 200 else 0
        return bool((alive or 0) >= workers)

    def wait_ready(self, workers: int, timeout: float = 60) -> None:
        what = f"/readyz with {workers} live workers"
        self.wait_until(lambda: self.ready(workers), timeout, what, self.procs)

    def wait_until(
        self, check: Callable[[], bool], timeout: float, what: str, watched: list[Process]
    ) -> None:
        """`wait_for(check)`, giving up at once when a process in `watched` exits."""

        def done() -> bool:
            for proc in watched:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"waiting for {what}: process {proc.pid} exited with code "
                        f"{proc.returncode}; logs in {self.logs}"
                    )
            return check()

        wait_for(done, timeout, what, detail=lambda: f"logs in {self.logs}")

    def terminate(self, proc: Process, grace: float = 20) -> None:
        """A clean shutdown: SIGTERM, and SIGKILL if it is still there after `grace` seconds."""
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        """Freeze every process, then SIGKILL it with all its descendants: a stage's child runs
        in its own session and would outlive its worker, as `serve --workers N`'s processes
        would their API. Frozen first, so nothing forks or takes a job while the tree is read."""
        alive = []
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    alive.append(psutil.Process(proc.pid))
        for each in alive:
            with contextlib.suppress(psutil.Error):
                each.send_signal(signal.SIGSTOP)
        family = []
        for each in alive:
            with contextlib.suppress(psutil.Error):
                family += each.children(recursive=True)
        for each in [*family, *alive]:
            with contextlib.suppress(psutil.Error):
                each.kill()
        psutil.wait_procs([*family, *alive], timeout=10)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
