"""Load: sustained `POST /runs` at a target rate with SSE subscribers attached and workers running,
on Postgres and then on SQLite. Loopback only, bounded in count and time; prints a table.

    .venv/bin/python bench/load.py           # 300 runs/s, 60 s, 500 subscribers, 2 workers
    .venv/bin/python bench/load.py --seconds 10 --db sqlite

Needs Redis (TRM_TEST_REDIS_URL, default redis://127.0.0.1:6379/11) and, for Postgres,
TRM_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test): a scratch database is
created and dropped. The submitted runs are `selftest` dry runs (the workers' share is small), so
what is measured is the API: validation, the insert with its first event, the enqueue, fan-out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REDIS_URL = os.environ.get("TRM_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
PG_ADMIN_URL = os.environ.get("TRM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SPEC = {"kind": "selftest", "dry_run": True}
# Watched by the subscribers: on the gpu queue (one per worker runs, the rest wait), long enough
# to outlast the window; killed with the service at the end.
WATCHED = {"kind": "selftest", "steps": 100000, "step_seconds": 0.2, "queue": "gpu"}
WATCHED_RUNS = 10


@dataclass
class Result:
    db: str
    target: float
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    sent: int = 0
    sse_events: int = 0
    sse_errors: int = 0
    sse_peak: int = 0
    completed: int = 0
    late_s: float = 0.0  # how far the generator fell behind its schedule at the end

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scratch_database(kind: str, tmp: Path) -> tuple[str, object]:
    if kind == "sqlite":
        return f"sqlite:///{tmp}/trm.db", None
    import psycopg

    name = f"trm_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')

    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}", drop


async def submitter(client: httpx.AsyncClient, res: Result, ids: list[str], stop_at: float) -> None:
    """Open loop: request i is due at t0 + i/rate, whatever the answers before it did."""
    t0 = time.monotonic()
    interval = 1.0 / res.target
    pending: set[asyncio.Task[None]] = set()

    async def one() -> None:
        started = time.monotonic()
        try:
            response = await client.post("/runs", json=SPEC)
            if response.status_code == 202:
                ids.append(response.json()["id"])
            else:
                res.errors += 1
        except httpx.HTTPError:
            res.errors += 1
        res.latencies.append(time.monotonic() - started)

    i = 0
    while True:
        due = t0 + i * interval
        if due >= stop_at:
            break
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
        res.sent += 1
        i += 1
    res.late_s = max(0.0, time.monotonic() - stop_at)
    if pending:
        await asyncio.wait(pending, timeout=30)


async def subscriber(
    client: httpx.AsyncClient, res: Result, run_id: str, stop_at: float, live: list[int]
) -> None:
    """Stays attached to one long run's SSE stream for the whole window (reconnecting with
    Last-Event-ID if the stream drops), as a dashboard tab or `trm watch` would."""
    last: str | None = None
    while time.monotonic() < stop_at:
        headers = {"Last-Event-ID": last} if last else {}
        try:
            live[0] += 1
            res.sse_peak = max(res.sse_peak, live[0])
            async with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as response:
                if response.status_code != 200:
                    res.sse_errors += 1
                    await asyncio.sleep(0.5)
                    continue
                async for line in response.aiter_lines():
                    if line.startswith("id:"):
                        last = line[3:].strip()
                    elif line.startswith("data:"):
                        res.sse_events += 1
                    if time.monotonic() >= stop_at:
                        return
        except httpx.HTTPError:
            res.sse_errors += 1
        finally:
            live[0] -= 1


async def drive(url: str, res: Result, subscribers: int) -> None:
    limits = httpx.Limits(max_connections=subscribers + 200, max_keepalive_connections=200)
    timeout = httpx.Timeout(30.0)
    ids: list[str] = []
    live = [0]
    async with (
        httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as posts,
        httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as streams,
    ):
        watched = []
        for _ in range(WATCHED_RUNS):  # long runs that publish a step every 0.2 s
            response = await posts.post("/runs", json=WATCHED)
            watched.append(response.json()["id"])
        stop_at = time.monotonic() + 2.0 + res.seconds
        subs = [
            asyncio.create_task(subscriber(streams, res, watched[i % WATCHED_RUNS], stop_at, live))
            for i in range(subscribers)
        ]
        await asyncio.sleep(2.0)  # let the subscribers attach before the load starts
        await submitter(posts, res, ids, stop_at)
        await asyncio.wait(subs, timeout=5)
        for task in subs:
            task.cancel()
        counts = (await posts.get("/metrics")).text
    for line in counts.splitlines():
        if line.startswith('trm_runs{status="completed"}'):
            res.completed = int(float(line.split()[-1]))


def run_one(db: str, args: argparse.Namespace) -> Result:
    from app.db import upgrade

    tmp = Path(tempfile.mkdtemp(prefix=f"trm-load-{db}-"))
    url, drop = scratch_database(db, tmp)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        upgrade(url)
        port = free_port()
        env = {
            **os.environ,
            "TRM_DATABASE_URL": url,
            "TRM_REDIS_URL": REDIS_URL,
            "TRM_REDIS_NAMESPACE": f"load{uuid.uuid4().hex[:8]}",
            "TRM_RUNS_DIR": str(tmp / "runs"),
            "TRM_DATA_DIR": str(tmp / "data"),
            "PYTHONUNBUFFERED": "1",
        }
        log = open(tmp / "service.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, "-m", "app.cli"]
        procs.append(
            subprocess.Popen(
                [*cmd, "serve", "--port", str(port)],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        for _ in range(args.workers):
            procs.append(
                subprocess.Popen(
                    [*cmd, "worker", "--queues", "cpu,gpu"],
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        res = Result(db, args.rate, args.seconds)
        asyncio.run(drive(base, res, args.subscribers))
        print(f"  ({db}: logs in {tmp / 'service.log'})", file=sys.stderr)
        print(f"  {db}: {row(res)}", file=sys.stderr, flush=True)
        return res
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if drop:
            drop()  # type: ignore[operator]


def row(r: Result) -> str:
    achieved = len(r.latencies) / (r.seconds + r.late_s)
    return (
        f"| {r.db} | {r.target:.0f} | {r.sent} | {achieved:.0f} | {r.errors} "
        f"| {r.pct(0.5):.0f} | {r.pct(0.95):.0f} | {r.pct(0.99):.0f} | {r.pct(1.0):.0f} "
        f"| {r.sse_peak} | {r.sse_events} | {r.sse_errors} | {r.completed} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["postgres", "sqlite", "both"], default="both")
    parser.add_argument("--rate", type=float, default=300.0, help="POST /runs per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    args.seconds = min(args.seconds, 300.0)  # bounded
    dbs = ["postgres", "sqlite"] if args.db == "both" else [args.db]
    results = [run_one(db, args) for db in dbs]
    head = (
        "| db | target/s | sent | achieved/s | errors | p50 ms | p95 ms | p99 ms | max ms "
        "| SSE peak | SSE events | SSE errors | completed |"
    )
    print(head)
    print("|" + "---|" * 13)
    for r in results:
        print(row(r))
    print(
        f"\n{args.seconds:.0f} s window, {args.subscribers} SSE subscribers, "
        f"{args.workers} workers, loopback, {os.cpu_count()} CPUs shared with the generator"
    )


if __name__ == "__main__":
    main()
