"""Service benchmark: prints a table of our figures against baselines measured in the
same run on this machine.

  POST /runs throughput and latency on SQLite   vs  GET /healthz on the same server
  enqueue → first stage start latency           vs  the same worker without wake-ups, polling at
                                                    arq's default 0.5 s
  SSE delivery with 200 and 1000 subscribers    vs  one subscriber
  API idle RSS                                  vs  a bare Python interpreter

Usage: .venv/bin/python bench/service.py [--seconds 10] [--out bench/out/service.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.db import make_engine  # noqa: E402
from core.events import Publisher  # noqa: E402
from core.redisconn import sync_redis  # noqa: E402
from tests.stack import Scratch, Stack, create_database  # noqa: E402

REDIS_URL = os.environ.get("TRM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def hammer(
    port: int,
    method: str,
    path: str,
    seconds: float,
    concurrency: int,
    body: dict[str, Any] | None = None,
) -> tuple[int, list[float], int]:
    """`concurrency` keep-alive connections, each sending the next request when the last answer
    is in. A bare HTTP/1.1 client (the request's bytes built once): on a 2-core box a full client
    library would take much of the CPU the server is being measured on."""
    payload = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    request = head.encode() + b"\r\n" + payload
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            writer.write(request)
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            errors += status >= 400
        writer.close()

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return len(latencies), latencies, errors


def measure_posts(stack: Stack, seconds: float) -> dict[str, Any]:
    api = stack.start_api()
    spec = {"kind": "selftest", "steps": 1, "step_seconds": 0}
    n_h, lat_h, _ = asyncio.run(hammer(stack.port, "GET", "/healthz", seconds / 2, 8))
    n_p, lat_p, errors = asyncio.run(hammer(stack.port, "POST", "/runs", seconds, 8, spec))
    stack.terminate(api)
    return {
        "healthz_rps": n_h / (seconds / 2),
        "healthz_p99_ms": pct(lat_h, 0.99) * 1000,
        "post_rps": n_p / seconds,
        "post_p50_ms": pct(lat_p, 0.5) * 1000,
        "post_p99_ms": pct(lat_p, 0.99) * 1000,
        "post_errors": errors,
        "posted": n_p,
    }


def measure_dispatch(stack: Stack, wake: bool, n: int) -> list[float]:
    """Seconds from a run's creation to its first stage's start, one run at a time."""
    from datetime import datetime

    api = stack.start_api()
    env = {} if wake else {"TRM_WAKE_ON_ENQUEUE": "false", "TRM_POLL_DELAY_S": "0.5"}
    worker = stack.start_worker(queues="cpu", extra_env=env)
    client = httpx.Client(base_url=stack.url, timeout=30)
    time.sleep(2.0)
    out = []
    for _ in range(n):
        run = client.post("/runs", json={"kind": "selftest", "steps": 1, "step_seconds": 0}).json()
        for _ in range(300):
            shown = client.get(f"/runs/{run['id']}").json()
            if shown["status"] in ("completed", "failed"):
                break
            time.sleep(0.05)
        stage = shown["stages"][0]
        created = datetime.fromisoformat(shown["created_at"])
        started = datetime.fromisoformat(stage["manifest"]["started_at"])
        out.append((started - created).total_seconds())
    stack.terminate(worker)
    stack.terminate(api)
    return out


async def sse_subscriber(
    port: int,
    run_id: str,
    expected: int,
    got: dict[int, float],
    ready: asyncio.Event,
    counter: list[int],
    total: int,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream"
        "\r\n\r\n".encode()
    )
    await writer.drain()
    seen, following = 0, False
    while seen < expected:
        line = await reader.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            event = json.loads(line[6:])
            if not following:  # the replayed first event: this stream now follows live ones
                following = True
                counter[0] += 1
                if counter[0] == total:
                    ready.set()
            if event["type"] == "log" and "sent" in event["data"]:
                got[event["data"]["n"]] = time.time() - event["data"]["sent"]
                seen += 1
    writer.close()


def measure_sse(stack: Stack, subscribers: int, events: int) -> dict[str, Any]:
    api = stack.start_api()
    run = httpx.post(f"{stack.url}/runs", json={"kind": "selftest", "steps": 1}).json()
    settings = stack.settings
    publisher = Publisher(make_engine(settings.database_url), sync_redis(settings), settings)
    results: list[dict[int, float]] = [{} for _ in range(subscribers)]

    async def main() -> None:
        ready = asyncio.Event()
        counter = [0]
        tasks = [
            asyncio.create_task(
                sse_subscriber(
                    stack.port, run["id"], events, results[i], ready, counter, subscribers
                )
            )
            for i in range(subscribers)
        ]
        # Every stream has replayed the run's first event and is following live ones.
        await asyncio.wait_for(ready.wait(), timeout=120)
        for n in range(events):
            await asyncio.to_thread(
                publisher.publish, run["id"], "log", {"n": n, "sent": time.time()}
            )
            await asyncio.sleep(0.05)
        await asyncio.wait(tasks, timeout=30)

    asyncio.run(main())
    stack.terminate(api)
    latencies = [v for r in results for v in r.values()]
    lost = subscribers * events - len(latencies)
    return {
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "lost": lost,
    }


def measure_rss(stack: Stack) -> dict[str, Any]:
    api = stack.start_api()
    time.sleep(1.0)
    proc = psutil.Process(api.pid)
    rss = proc.memory_info().rss
    maps = Path(f"/proc/{api.pid}/maps").read_text()
    torch_loaded = "libtorch" in maps
    stack.terminate(api)
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    time.sleep(1.0)
    bare_rss = psutil.Process(bare.pid).memory_info().rss
    bare.kill()
    return {
        "api_rss_mb": rss / 1e6,
        "bare_python_rss_mb": bare_rss / 1e6,
        "torch_loaded": torch_loaded,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--dispatch-runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "service.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        used: list[tuple[Scratch, Stack]] = []

        def fresh() -> Stack:  # each measure gets its own database and queue namespace
            folder = Path(tmp) / str(len(used))
            scratch = Scratch(
                folder, create_database("sqlite", folder), prefix="b", redis_url=REDIS_URL
            )
            scratch.migrate()
            used.append((scratch, Stack({**scratch.env, "TRM_LOG_LEVEL": "WARNING"}, folder)))
            return used[-1][1]

        try:
            posts = measure_posts(fresh(), args.seconds)
            fast = measure_dispatch(fresh(), True, args.dispatch_runs)
            slow = measure_dispatch(fresh(), False, max(5, args.dispatch_runs // 4))
            sse1 = measure_sse(fresh(), 1, 20)
            sse200 = measure_sse(fresh(), 200, 20)
            sse1000 = measure_sse(fresh(), 1000, 10)
            rss = measure_rss(fresh())
        finally:
            for scratch, stack in used:
                stack.stop()
                scratch.drop()
    rows = [
        (
            "POST /runs throughput (runs/s)",
            posts["post_rps"],
            posts["healthz_rps"],
            "GET /healthz req/s",
            ">= 300",
        ),
        (
            "POST /runs p99 (ms)",
            posts["post_p99_ms"],
            posts["healthz_p99_ms"],
            "GET /healthz p99",
            "< 50",
        ),
        (
            "enqueue -> stage start p50 (ms)",
            pct(fast, 0.5) * 1000,
            pct(slow, 0.5) * 1000,
            "arq default poll 0.5 s",
            "<= 25",
        ),
        ("SSE 200 subscribers p50 (ms)", sse200["p50_ms"], sse1["p50_ms"], "1 subscriber", "<= 30"),
        (
            "SSE 1000 subscribers p50 (ms)",
            sse1000["p50_ms"],
            sse1["p50_ms"],
            "1 subscriber",
            "<= 150",
        ),
        ("API idle RSS (MB)", rss["api_rss_mb"], rss["bare_python_rss_mb"], "bare python", "< 150"),
    ]
    print(f"{'measure':34} {'ours':>10} {'baseline':>10} {'ratio':>7}  {'baseline is':24} target")
    for name, ours, base, what, target in rows:
        ratio = ours / base if base else float("nan")
        print(f"{name:34} {ours:10.1f} {base:10.1f} {ratio:7.2f}  {what:24} {target}")
    print(
        f"POST errors: {posts['post_errors']} of {posts['posted']}; SSE lost events: "
        f"200 subs {sse200['lost']}, 1000 subs {sse1000['lost']}; "
        f"SSE p99 200/1000: {sse200['p99_ms']:.1f}/{sse1000['p99_ms']:.1f} ms; "
        f"torch loaded in API: {rss['torch_loaded']}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "posts": posts,
                "dispatch_s": fast,
                "dispatch_default_s": slow,
                "sse1": sse1,
                "sse200": sse200,
                "sse1000": sse1000,
                "rss": rss,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
