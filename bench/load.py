"""Load (issue 9): sustained `POST /runs` at a target rate with SSE subscribers attached and
workers running, on Postgres and then on SQLite. Loopback only, bounded in count and time: every
phase ends within a hard limit and reports what it had when it stopped. Prints a table.

    .venv/bin/python bench/load.py                  # 300 runs/s, 60 s, 500 subscribers, 2 workers
    .venv/bin/python bench/load.py --seconds 15 --rate 100 --db sqlite

Per database: a scratch database (Postgres: created and dropped; needs TRM_TEST_POSTGRES_URL,
default postgresql://postgres@127.0.0.1:5432/test), Redis (TRM_TEST_REDIS_URL, default
redis://127.0.0.1:6379/11) under a fresh namespace, `trm serve` and `--workers` x
`trm worker --queues cpu`.

- Submitted runs are `selftest` dry runs on the cpu queue: the API validates, inserts the run with
  its first event and enqueues it (concurrent submissions together: app/intake.py); the workers
  take them as fast as the CPU the API leaves them allows (they run at TRM_WORKER_NICE, default
  10; `TRM_WORKER_NICE=0` to compare). Open loop: request i is due at t0 + i/rate whatever the
  answers before it did, on at most `--connections` keep-alive connections; latency is counted
  from the request's due time, so an API that falls behind shows it (no coordinated omission);
  `served` is send -> answer, the API's own share.
  Nothing is sent after the window closes: what was due but not sent by then is `unsent`. So the
  generator holds at most `--connections` requests, however far the API falls behind.
- Subscribers: raw SSE streams spread over `--watched` runs that sit queued on the gpu queue (no
  worker here serves it, so they never end and burn no CPU). The bench publishes `log` events to
  them at `--events-rate` through `core.events.Publisher`, exactly as a worker does (stored, then
  fanned out over Redis); every subscriber must receive every one of its run's events once.
  `lost` and `dup` count per subscriber, `SSE ms` is publish -> receipt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REDIS_URL = os.environ.get("TRM_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
PG_ADMIN_URL = os.environ.get("TRM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SPEC = json.dumps({"kind": "selftest", "dry_run": True}).encode()
WATCHED = {"kind": "selftest", "steps": 1, "queue": "gpu"}  # never taken: workers serve cpu
REQUEST_TIMEOUT_S = 30.0
ATTACH_TIMEOUT_S = 30.0
DRAIN_S = 15.0  # after the window: for the last answers and the last SSE events


@dataclass
class Phase:
    db: str
    target: float
    seconds: float
    subscribers: int
    step: str = "not started"  # where the phase is; named in the report if it times out
    outcome: str = "ok"
    sent: int = 0
    accepted: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    unsent: int = 0
    latencies: list[float] = field(default_factory=list)  # due time -> answer
    served: list[float] = field(default_factory=list)  # sent -> answer: the API's own share
    window_s: float = 0.0  # from the first due time to the last answer
    attached: int = 0
    sse_errors: int = 0
    sse_reopened: int = 0
    published: dict[str, set[int]] = field(default_factory=dict)
    received: list[tuple[str, Counter[int]]] = field(default_factory=list)
    sse_latencies: list[float] = field(default_factory=list)
    runs_by_status: dict[str, int] = field(default_factory=dict)
    bench_cpu_s: float = 0.0
    window_cpu: dict[str, float] = field(default_factory=dict)  # CPU s per part, in the window

    def sse_counts(self) -> tuple[int, int, int, int]:
        """(expected, delivered, lost, duplicated) over every subscriber."""
        expected = delivered = dup = 0
        for run_id, got in self.received:
            want = self.published.get(run_id, set())
            expected += len(want)
            delivered += sum(1 for n in got if n in want)
            dup += sum(c - 1 for c in got.values() if c > 1)
        return expected, delivered, expected - delivered, dup


def pct(values: list[float], q: float) -> float:
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- a minimal HTTP/1.1 client: the generator shares the machine, so it must stay cheap --------


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await reader.readline()
    if not line:
        raise ConnectionError("connection closed before the answer")
    status = int(line.split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def body_parts(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while size := int((await reader.readline()).split(b";")[0], 16):
            yield await reader.readexactly(size)
            await reader.readline()
        await reader.readline()
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while part := await reader.read(65536):
            yield part


class Connection:
    """One keep-alive connection: a request at a time, reopened after any error."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
        )
        await self.writer.drain()
        status, headers = await read_head(self.reader)
        data = b"".join([part async for part in body_parts(self.reader, headers)])
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


# --- the load --------------------------------------------------------------------------------


async def submit(ph: Phase, port: int, t0: float, stop_at: float, connections: int) -> None:
    """Open loop on `connections` lanes; each takes the next due request when it is free and
    sends it, late if need be, until the window closes; an answer gets REQUEST_TIMEOUT_S."""
    due_index = itertools.count()
    interval = 1.0 / ph.target

    async def lane() -> None:
        conn = Connection(port)
        try:
            while (due := t0 + next(due_index) * interval) < stop_at:
                if (delay := due - time.monotonic()) > 0:
                    await asyncio.sleep(delay)
                elif time.monotonic() >= stop_at:
                    return  # the window closed while every lane was busy: `unsent`
                ph.sent += 1
                sent = time.monotonic()
                try:
                    status, _ = await asyncio.wait_for(conn.post("/runs", SPEC), REQUEST_TIMEOUT_S)
                    if status == 202:
                        ph.accepted += 1
                    else:
                        ph.errors[str(status)] += 1
                except (OSError, EOFError, ValueError, TimeoutError) as exc:
                    ph.errors[type(exc).__name__] += 1
                    conn.close()
                now = time.monotonic()
                ph.latencies.append(now - due)
                ph.served.append(now - sent)
                ph.window_s = max(ph.window_s, now - t0)
        finally:
            conn.close()

    await asyncio.gather(*(lane() for _ in range(connections)))
    ph.unsent = max(0, math.ceil((stop_at - t0) * ph.target) - ph.sent)


async def subscriber(
    ph: Phase, port: int, run_id: str, got: Counter[int], on_attach: Callable[[], None]
) -> None:
    """One dashboard tab: follows the run's SSE stream, reconnecting with Last-Event-ID."""
    last: str | None = None
    first = True
    while True:
        writer = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
            resume = f"Last-Event-ID: {last}\r\n" if last else ""
            writer.write(
                f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: bench\r\n"
                f"Accept: text/event-stream\r\n{resume}\r\n".encode()
            )
            await writer.drain()
            status, headers = await asyncio.wait_for(read_head(reader), ATTACH_TIMEOUT_S)
            if status != 200:
                ph.sse_errors += 1
                await asyncio.sleep(0.5)
                continue
            if first:
                first = False
                on_attach()
            buffer = b""
            async for part in body_parts(reader, headers):
                *lines, buffer = (buffer + part).split(b"\n")
                for line in lines:
                    if line.startswith(b"id:"):
                        last = line[3:].strip().decode()
                    elif line.startswith(b"data:"):
                        event = json.loads(line[5:])
                        data = event.get("data") or {}
                        if event.get("type") == "log" and "bench_n" in data:
                            got[data["bench_n"]] += 1
                            if got[data["bench_n"]] == 1:
                                ph.sse_latencies.append(time.time() - data["sent"])
            ph.sse_reopened += 1  # the server ended a stream that should not end
        except (OSError, EOFError, ValueError, TimeoutError):
            ph.sse_errors += 1
            await asyncio.sleep(0.5)
        finally:
            if writer is not None:
                writer.close()


def publish(
    settings: Any,
    watched: list[str],
    rate: float,
    t0: float,
    stop_at: float,
    stop: threading.Event,
    ph: Phase,
) -> None:
    """The watched runs' events during the window, through the one publisher the workers use."""
    from core.db import make_engine
    from core.events import Publisher
    from core.redisconn import sync_redis

    engine = make_engine(settings.database_url)
    publisher = Publisher(engine, sync_redis(settings), settings)
    try:
        for i in itertools.count():
            due = t0 + i / rate
            if due >= stop_at or stop.wait(max(0.0, due - time.monotonic())):
                return
            run_id = watched[i % len(watched)]
            n = i // len(watched)
            with contextlib.suppress(Exception):  # an event that failed to publish is not due
                publisher.publish(run_id, "log", {"bench_n": n, "sent": time.time()})
                ph.published[run_id].add(n)
    finally:
        engine.dispose()


async def drive(ph: Phase, stack: Stack, args: argparse.Namespace) -> None:
    port = stack.port
    conn = Connection(port)
    ph.step = "creating the watched runs"
    watched = []
    for _ in range(args.watched):
        status, body = await asyncio.wait_for(conn.post("/runs", json.dumps(WATCHED).encode()), 30)
        assert status == 202, f"POST /runs for a watched run answered {status}: {body[:300]!r}"
        watched.append(json.loads(body)["id"])
    conn.close()
    ph.published = {run_id: set() for run_id in watched}

    ph.step = f"attaching {ph.subscribers} SSE subscribers"
    all_attached = asyncio.Event()

    def attached() -> None:
        ph.attached += 1
        if ph.attached == ph.subscribers:
            all_attached.set()

    subs = []
    for i in range(ph.subscribers):
        run_id = watched[i % len(watched)]
        ph.received.append((run_id, Counter()))
        subs.append(asyncio.create_task(subscriber(ph, port, run_id, ph.received[-1][1], attached)))
    stop_publishing = threading.Event()
    publisher: threading.Thread | None = None
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_attached.wait(), ATTACH_TIMEOUT_S)
        await asyncio.sleep(1.0)  # every stream has replayed and is following

        ph.step = f"the {ph.seconds:g} s load window"
        t0 = time.monotonic()
        stop_at = t0 + ph.seconds
        publisher = threading.Thread(
            target=publish,
            args=(stack.settings, watched, args.events_rate, t0, stop_at, stop_publishing, ph),
            daemon=True,
        )
        publisher.start()
        before = stack.cpu_seconds()
        await submit(ph, port, t0, stop_at, args.connections)
        after = stack.cpu_seconds()
        ph.window_cpu = {k: after[k] - before[k] for k in after}
        stop_publishing.set()
        await asyncio.to_thread(publisher.join, 10)

        ph.step = "waiting for the last SSE events"
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and ph.sse_counts()[2] > 0:
            await asyncio.sleep(0.2)
    finally:
        stop_publishing.set()
        for task in subs:
            task.cancel()
        await asyncio.gather(*subs, return_exceptions=True)


# --- the service under load --------------------------------------------------------------------


class Stack:
    """A scratch database, the API and the workers; `close()` leaves nothing behind."""

    def __init__(self, db: str, workers: int, api_processes: int = 1) -> None:
        self.db, self.workers, self.api_processes = db, workers, api_processes
        self.tmp = Path(tempfile.mkdtemp(prefix=f"trm-load-{db}-"))
        self.port = free_port()
        self.namespace = f"load{uuid.uuid4().hex[:8]}"
        self.pg_name = f"trm_load_{uuid.uuid4().hex[:10]}" if db == "postgres" else None
        self.procs: list[subprocess.Popen[bytes]] = []
        self._closed = threading.Lock()
        if self.pg_name:
            url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{self.pg_name}"
        else:
            url = f"sqlite:///{self.tmp}/trm.db"
        self.env = {
            "TRM_DATABASE_URL": url,
            "TRM_REDIS_URL": REDIS_URL,
            "TRM_REDIS_NAMESPACE": self.namespace,
            "TRM_RUNS_DIR": str(self.tmp / "runs"),
            "TRM_DATA_DIR": str(self.tmp / "data"),
            "TRM_LOG_LEVEL": "WARNING",
        }
        from core.settings import Settings

        self.settings = Settings(
            **{k[4:].lower(): v for k, v in self.env.items() if k != "TRM_LOG_LEVEL"}  # type: ignore[arg-type]
        )

    def start(self, ph: Phase) -> None:
        from core.db import upgrade

        ph.step = "creating the database"
        if self.pg_name:
            self._pg(f'CREATE DATABASE "{self.pg_name}"')
        upgrade(self.settings.database_url)
        ph.step = "starting the API and the workers"
        log = open(self.tmp / "service.log", "wb")  # noqa: SIM115
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        cli = [sys.executable, "-m", "app.cli"]
        commands = [[*cli, "serve", "--port", str(self.port), "--workers", str(self.api_processes)]]
        commands += [[*cli, "worker", "--queues", "cpu"]] * self.workers
        for command in commands:
            self.procs.append(
                subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._ready():
                return
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a service process exited; see {self.tmp / 'service.log'}")
            time.sleep(0.3)
        raise RuntimeError(f"API or workers not ready in 60 s; see {self.tmp / 'service.log'}")

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                sock.settimeout(5)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
        except OSError:
            return False
        head, _, body = answer.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return False
        return bool(json.loads(body)["checks"]["workers"]["alive"] >= self.workers)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds so far: the API, the workers with their children, this bench, and the
        whole machine's busy time (the rest is the databases, Redis and anything else)."""

        def used(proc: psutil.Process) -> float:
            """The process, its ended children, and its live descendants."""
            total = 0.0
            with contextlib.suppress(psutil.Error):
                for each in [proc, *proc.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        t = each.cpu_times()
                        total += t.user + t.system + t.children_user + t.children_system
            return total

        api, *workers = (psutil.Process(p.pid) for p in self.procs)
        me = resource.getrusage(resource.RUSAGE_SELF)
        machine = psutil.cpu_times()
        return {
            "api": used(api),
            "workers": sum(used(w) for w in workers),
            "bench": me.ru_utime + me.ru_stime,
            "busy": machine.user + machine.nice + machine.system + machine.irq + machine.softirq,
        }

    def count_runs(self, ph: Phase) -> None:
        import sqlalchemy as sa

        from core.db import make_engine

        engine = make_engine(self.settings.database_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT status, count(*) FROM runs GROUP BY status"))
                ph.runs_by_status = {status: int(n) for status, n in rows}
        finally:
            engine.dispose()

    def close(self) -> None:
        """Freeze the workers, kill them with every descendant (a stage's child runs in its own
        session and would outlive its worker), then the API; drop the database and the keys."""
        if not self._closed.acquire(blocking=False):
            return
        procs = [psutil.Process(p.pid) for p in self.procs if p.poll() is None]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGSTOP)
        family = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                family += proc.children(recursive=True)
        for proc in [*family, *procs]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs([*family, *procs], timeout=10)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=1)
        if self.pg_name:
            with contextlib.suppress(Exception):
                self._pg(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')
        with contextlib.suppress(Exception):
            import redis

            client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
            keys = list(client.scan_iter(match=f"*{self.namespace}*", count=1000))
            for i in range(0, len(keys), 1000):
                client.delete(*keys[i : i + 1000])
        shutil.rmtree(self.tmp / "runs", ignore_errors=True)

    @staticmethod
    def _pg(sql: str) -> None:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)


def hard_limit(args: argparse.Namespace) -> float:
    """The most one phase may take, all of it: start, attach, window, drain, count."""
    return args.seconds + REQUEST_TIMEOUT_S + ATTACH_TIMEOUT_S + DRAIN_S + 120


def run_phase(db: str, args: argparse.Namespace, done: list[Phase]) -> Phase:
    ph = Phase(db, args.rate, args.seconds, args.subscribers)
    stack = Stack(db, args.workers, args.api_processes)
    started = resource.getrusage(resource.RUSAGE_SELF)

    def expired() -> None:  # last resort, if even cancelling the phase did not end it
        ph.outcome = f"HARD TIMEOUT ({hard_limit(args):.0f} s) during {ph.step}"
        print_table([*done, ph], args)
        stack.close()
        os._exit(3)

    watchdog = threading.Timer(hard_limit(args) + 30, expired)
    watchdog.daemon = True
    watchdog.start()
    try:
        stack.start(ph)
        asyncio.run(asyncio.wait_for(drive(ph, stack, args), hard_limit(args) - 60))
        ph.step = "counting runs"
        stack.count_runs(ph)
    except TimeoutError:
        ph.outcome = f"TIMEOUT during {ph.step}"
    except Exception as exc:
        ph.outcome = f"ERROR during {ph.step}: {type(exc).__name__}: {exc}"[:300]
    finally:
        stack.close()
        watchdog.cancel()
    now = resource.getrusage(resource.RUSAGE_SELF)
    ph.bench_cpu_s = now.ru_utime + now.ru_stime - started.ru_utime - started.ru_stime
    print(f"  {db}: {row(ph)}  (logs: {stack.tmp / 'service.log'})", file=sys.stderr, flush=True)
    return ph


HEAD = (
    "| db | target/s | sent | accepted | errors | unsent | achieved/s | p50 ms | p99 ms | max ms "
    "| served p50 ms "
    "| SSE attached | SSE expected | SSE delivered | lost | dup | SSE p50 ms | SSE p99 ms "
    "| completed | still queued | bench CPU s | window CPU s: api/workers/bench/rest | outcome |"
)


def row(ph: Phase) -> str:
    achieved = ph.accepted / max(ph.seconds, ph.window_s) if ph.window_s else 0.0
    errors = sum(ph.errors.values())
    detail = ", ".join(f"{k}: {v}" for k, v in ph.errors.most_common(3))
    expected, delivered, lost, dup = ph.sse_counts()
    trouble = ""
    if ph.sse_errors or ph.sse_reopened:
        trouble = f" ({ph.sse_errors} errors, {ph.sse_reopened} ended)"
    watched = len(ph.published)
    queued = ph.runs_by_status.get("queued", 0) - watched if ph.runs_by_status else None
    return (
        f"| {ph.db} | {ph.target:g} | {ph.sent} | {ph.accepted} "
        f"| {errors}{f' ({detail})' if errors else ''} | {ph.unsent} | {achieved:.0f} "
        f"| {pct(ph.latencies, 0.5):.0f} | {pct(ph.latencies, 0.99):.0f} "
        f"| {pct(ph.latencies, 1.0):.0f} | {pct(ph.served, 0.5):.0f} "
        f"| {ph.attached}/{ph.subscribers}{trouble} | {expected} "
        f"| {delivered} | {lost} | {dup} | {pct(ph.sse_latencies, 0.5):.0f} "
        f"| {pct(ph.sse_latencies, 0.99):.0f} | {ph.runs_by_status.get('completed', '-')} "
        f"| {queued if queued is not None else '-'} | {ph.bench_cpu_s:.0f} | {cpu_split(ph)} "
        f"| {ph.outcome} |"
    )


def cpu_split(ph: Phase) -> str:
    """Where the machine's CPU went during the load window (of its seconds x CPUs)."""
    c = ph.window_cpu
    if not c:
        return "-"
    rest = c["busy"] - c["api"] - c["workers"] - c["bench"]
    parts = "/".join(f"{v:.0f}" for v in (c["api"], c["workers"], c["bench"], rest))
    return f"{parts} of {ph.seconds * (os.cpu_count() or 1):.0f}"


def print_table(phases: list[Phase], args: argparse.Namespace) -> None:
    from core.settings import get_settings

    nice = get_settings().worker_nice  # what the workers take (TRM_WORKER_NICE)
    print(HEAD)
    print("|" + "---|" * HEAD.count(" | ") + "---|")
    for ph in phases:
        print(row(ph))
    print(
        f"\n{args.seconds:g} s window per database, {args.subscribers} SSE subscribers on "
        f"{args.watched} runs ({args.events_rate:g} events/s in all), {args.workers} workers "
        f"at nice {nice} (TRM_WORKER_NICE), {args.connections} connections, loopback, "
        f"{os.cpu_count()} CPUs shared by the generator, the API, the workers and the database.",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", choices=["postgres", "sqlite", "both"], default="both")
    parser.add_argument("--rate", type=float, default=300.0, help="POST /runs per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="load window per database")
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--watched", type=int, default=10, help="runs the subscribers follow")
    parser.add_argument("--events-rate", type=float, default=20.0, help="their events per second")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--api-processes", type=int, default=1, help="`trm serve --workers N`: API processes"
    )
    parser.add_argument("--connections", type=int, default=64, help="most requests in flight")
    args = parser.parse_args()
    args.seconds = min(args.seconds, 300.0)  # bounded
    args.subscribers = min(args.subscribers, 5000)
    done: list[Phase] = []
    for db in ["postgres", "sqlite"] if args.db == "both" else [args.db]:
        done.append(run_phase(db, args, done))
    print_table(done, args)
    return 0 if all(ph.outcome == "ok" for ph in done) else 1


if __name__ == "__main__":
    sys.exit(main())
