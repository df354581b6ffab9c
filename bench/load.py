"""Load: sustained `POST /runs` at a target rate with SSE subscribers attached and
workers running, on Postgres and then on SQLite. Loopback only, bounded in count and time: every
phase ends within a hard limit and reports what it had when it stopped. Prints a table.

    .venv/bin/python bench/load.py                  # 300 runs/s, 60 s, 500 subscribers, 2 workers
    .venv/bin/python bench/load.py --seconds 15 --rate 100 --db sqlite

Per database: a scratch database (Postgres: created and dropped; needs TRM_TEST_POSTGRES_URL,
default postgresql://postgres@127.0.0.1:5432/test), Redis (TRM_TEST_REDIS_URL, default
redis://127.0.0.1:6379/11) under a fresh namespace, `trm serve` and `--workers` x
`trm worker --queues cpu`: the tests' service stack (tests/stack.py). The generator, the
subscribers and the publisher are in bench/loadgen.py.

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
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.loadgen import (  # noqa: E402
    ATTACH_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    Connection,
    Phase,
    publish,
    submit,
    subscriber,
)
from tests.stack import Scratch, Stack, create_database  # noqa: E402

WATCHED = {"kind": "selftest", "steps": 1, "queue": "gpu"}  # never taken: workers serve cpu
DRAIN_S = 15.0  # after the window: for the last answers and the last SSE events


def pct(values: list[float], q: float) -> float:
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


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
        before = cpu_seconds(stack)
        await submit(ph, port, t0, stop_at, args.connections)
        after = cpu_seconds(stack)
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


def cpu_seconds(stack: Stack) -> dict[str, float]:
    """CPU seconds so far: the API, the workers with their children, this bench, and the whole
    machine's busy time (the rest is the databases, Redis and anything else)."""

    def used(proc: psutil.Process) -> float:
        """The process, its ended children, and its live descendants."""
        total = 0.0
        with contextlib.suppress(psutil.Error):
            for each in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = each.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
        return total

    assert stack.api is not None
    workers = [psutil.Process(p.pid) for p in stack.procs if p is not stack.api]
    me = resource.getrusage(resource.RUSAGE_SELF)
    machine = psutil.cpu_times()
    return {
        "api": used(psutil.Process(stack.api.pid)),
        "workers": sum(used(w) for w in workers),
        "bench": me.ru_utime + me.ru_stime,
        "busy": machine.user + machine.nice + machine.system + machine.irq + machine.softirq,
    }


def count_runs(scratch: Scratch, ph: Phase) -> None:
    import sqlalchemy as sa

    from core.db import make_engine

    engine = make_engine(scratch.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT status, count(*) FROM runs GROUP BY status"))
            ph.runs_by_status = {status: int(n) for status, n in rows}
    finally:
        engine.dispose()


def hard_limit(args: argparse.Namespace) -> float:
    """The most one phase may take, all of it: start, attach, window, drain, count."""
    return args.seconds + REQUEST_TIMEOUT_S + ATTACH_TIMEOUT_S + DRAIN_S + 120


def run_phase(db: str, args: argparse.Namespace, done: list[Phase]) -> Phase:
    ph = Phase(db, args.rate, args.seconds, args.subscribers)
    tmp = Path(tempfile.mkdtemp(prefix=f"trm-load-{db}-"))
    scratch: Scratch | None = None
    stack: Stack | None = None
    closing = threading.Lock()
    started = resource.getrusage(resource.RUSAGE_SELF)

    def close() -> None:
        """Once, from the phase or from the watchdog: nothing left running or on the servers."""
        if not closing.acquire(blocking=False):
            return
        if stack is not None:
            stack.stop()
        if scratch is not None:
            with contextlib.suppress(Exception):
                scratch.drop()
        shutil.rmtree(tmp / "runs", ignore_errors=True)

    def expired() -> None:  # last resort, if even cancelling the phase did not end it
        ph.outcome = f"HARD TIMEOUT ({hard_limit(args):.0f} s) during {ph.step}"
        print_table([*done, ph], args)
        close()
        os._exit(3)

    watchdog = threading.Timer(hard_limit(args) + 30, expired)
    watchdog.daemon = True
    watchdog.start()
    try:
        ph.step = "creating the database"
        scratch = Scratch(tmp, create_database(db, tmp, prefix="load"), prefix="load")
        scratch.migrate()
        ph.step = "starting the API and the workers"
        stack = Stack({**scratch.env, "TRM_LOG_LEVEL": "WARNING"}, tmp / "logs")
        for _ in range(args.workers):
            stack.start_worker(queues="cpu")
        stack.start_api(args.api_processes, timeout=60)
        stack.wait_ready(args.workers, timeout=60)
        asyncio.run(asyncio.wait_for(drive(ph, stack, args), hard_limit(args) - 60))
        ph.step = "counting runs"
        count_runs(scratch, ph)
    except TimeoutError:
        ph.outcome = f"TIMEOUT during {ph.step}"
    except Exception as exc:
        ph.outcome = f"ERROR during {ph.step}: {type(exc).__name__}: {exc}"[:300]
    finally:
        close()
        watchdog.cancel()
    now = resource.getrusage(resource.RUSAGE_SELF)
    ph.bench_cpu_s = now.ru_utime + now.ru_stime - started.ru_utime - started.ru_stime
    print(f"  {db}: {row(ph)}  (logs: {tmp / 'logs'})", file=sys.stderr, flush=True)
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
