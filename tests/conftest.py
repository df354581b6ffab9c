"""Shared fixtures: real SQLite and Postgres databases, a real Redis, real API and worker
processes (tests/stack.py). Nothing of ours is mocked."""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.db import upgrade
from core.settings import Settings
from tests.probe_runs import ProbeRuns
from tests.probe_runs import probe_runs as trained_probe_runs
from tests.probe_runs import rows_folder as rows_folder  # tests import it from here
from tests.stack import REDIS_URL as REDIS_URL  # tests import these two from here
from tests.stack import ROOT as ROOT
from tests.stack import (
    Scratch,
    Stack,
    create_database,
    drop_database,
    free_port,
    settings_of,
    wait_for,
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Our packages byte-compiled once, before the test processes start: the suite starts
    hundreds of API, worker and stage processes, and with PYTHONDONTWRITEBYTECODE set (as on CI)
    each compiled every module of ours it imported again (~0.15 s of CPU a start)."""
    if not hasattr(session.config, "workerinput"):  # the controller of pytest-xdist, or alone
        for package in ("core", "app", "worker"):
            compileall.compile_dir(ROOT / package, quiet=1)


def _weight(item: pytest.Item) -> float:
    """How slow a test says it is: its own timeout when longer than the default, 1 for `slow`."""
    timeout = item.get_closest_marker("timeout")
    longer = float(timeout.args[0]) if timeout and timeout.args and timeout.args[0] > 300 else 0
    return max(longer, 1.0 if item.get_closest_marker("slow") else 0.0)


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist's `--dist loadfile` hands out files by their number of tests unless told
    not to (`--no-loadscope-reorder`): the order below is the one it keeps."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules holding slow tests (a longer timeout first, then `slow`) run first, then the
    others by their number of tests, most first: with scripts/test.sh's processes the slow ones
    start beside the many quick ones instead of running alone at the end (xdist's own order, by
    number of tests alone, put the one-test slow files last). The order inside a module is
    kept."""
    weight: dict[str, float] = {}
    tests: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        weight[module] = max(weight.get(module, 0.0), _weight(item))
        tests[module] = tests.get(module, 0) + 1
    items.sort(key=lambda item: (-weight[m := item.nodeid.split("::")[0]], -tests[m]))


# Every timer short, so that heartbeats, requeues, cancels and keep-alives happen within a test.
QUICK = {
    "TRM_HEARTBEAT_S": "0.5",
    "TRM_STALE_AFTER_S": "3",
    "TRM_RECONCILE_EVERY_S": "0.5",
    "TRM_REQUEUE_AFTER_S": "1",
    "TRM_CANCEL_GRACE_S": "3",
    "TRM_SSE_KEEPALIVE_S": "1",
}


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """`asyncio.run` in a thread of its own: a fixture of another test (the dashboard's browser)
    may leave an event loop running in the main thread, where `asyncio.run` refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = create_database(request.param, tmp_path)
    yield url
    drop_database(url)


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of every process of one test's service (API, workers, children)."""
    scratch = Scratch(tmp_path, database_url)
    yield {**scratch.env, **QUICK}
    scratch.forget()


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    return settings_of(env)


@pytest.fixture
def migrated(settings: Settings) -> Settings:
    upgrade(settings.database_url)
    return settings


class Service(Stack):
    """The service as the tests drive it: its processes (`Stack`), an HTTP client, and the API
    calls the tests share."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        super().__init__(env, logs)
        self.http = httpx.Client(base_url=self.url, timeout=30)

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
        return dict(response.json())

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

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
        super().stop()
        self.http.close()


@pytest.fixture
def service(env: dict[str, str], migrated: Settings, tmp_path: Path) -> Iterator[Service]:
    logs = tmp_path / "logs"
    logs.mkdir()
    svc = Service(env, logs)
    svc.start_api()
    yield svc
    svc.stop()


@contextlib.contextmanager
def module_service(
    database: str, root: Path, workers: int = 0, env: dict[str, str] | None = None
) -> Iterator[Service]:
    """A service on a fresh `database` under `root` with an API and `workers` workers (ready
    when /readyz counts them), its processes given `env` too; stopped, and its database and
    Redis keys dropped, after. With TRM_API_TOKEN in `env`, its client sends the token."""
    scratch = Scratch(root, create_database(database, root))
    scratch.migrate()
    svc = Service({**scratch.env, **QUICK, **(env or {})}, root / "logs")
    if env and "TRM_API_TOKEN" in env:
        svc.http.headers["Authorization"] = f"Bearer {env['TRM_API_TOKEN']}"
    try:
        svc.start_api()
        for _ in range(workers):
            svc.start_worker()
        if workers:
            svc.wait_ready(workers)
        yield svc
    finally:
        svc.stop()
        scratch.drop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def shared_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """One service (an API, no worker) per database for a module's tests that look only at the
    runs they submit themselves, or none: an API start per test cost more than most of these
    tests. A test that counts every run (a listing, the metrics) or starts a worker takes a
    `service` of its own."""
    with module_service(request.param, tmp_path_factory.mktemp(f"shared-{request.param}")) as svc:
        yield svc


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def working_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """`shared_service` with one worker: for a module's tests that each run their own runs to
    their end and look only at those (an API and a worker start, ~2 s of CPU, cost more than
    many such runs). A test that needs a run to stay queued, names or kills its workers, or
    counts every run takes a `service` of its own."""
    root = tmp_path_factory.mktemp(f"working-{request.param}")
    with module_service(request.param, root, workers=1) as svc:
        yield svc


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


@pytest.fixture(scope="session")
def route_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real `route` play logs built into a real corpus (no hand-written rows): 6 worlds x 60
    episodes, split by episode (val: unseen episodes)."""
    from core.schemas.corpus import CorpusSpec
    from worker.corpus import build_corpus
    from worker.envs import generate

    root = tmp_path_factory.mktemp("route")
    generate(root / "play", families=["route"], worlds=6, episodes=60, seed=0)
    source = {"type": "trm_play_root", "name": "route", "path": str(root / "play")}
    spec = CorpusSpec.model_validate({"sources": [source], "split": {"by": "episode"}})
    build_corpus(spec, root / "corpus")
    return root / "corpus"


@pytest.fixture(scope="session")
def probe_runs(tmp_path_factory: pytest.TempPathFactory, route_corpus: Path) -> ProbeRuns:
    """A trm and a gbdt probe-trained through the service once per session
    (tests/probe_runs.py): pytest-xdist's processes share the parent of their temporary
    folders."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
    return trained_probe_runs(shared, route_corpus)
