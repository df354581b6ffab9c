"""bench/decide.py's HTTP part: a real `trm decide-server` on a fresh SQLite registry with each
trained model promoted, one-row requests from concurrent clients (requests/s, p50/p99), and the
decision process's memory with many versions of one name decided round-robin."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def http_bench(
    workdir: Path,
    trained: dict[str, Path],
    rows: list[Any],
    seconds: float,
    clients: list[int],
    versions: int,
    rounds: int,
    client: str = "raw",
    workers: int = 1,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each trained model promoted in a fresh SQLite registry, a `trm decide-server` started on
    it, and one-row requests from `clients` concurrent clients (`client`: how they speak HTTP,
    `_load`): requests/s, p50/p99 in ms, and the clients' own and the decision process's CPU a
    request.
    Then its memory with `versions` versions of one name promoted (the trm and the gbdt in
    turn), each decided `rounds` times round-robin, one call each (pinned: `bench-many@k`):
    the process's resident memory (VmRSS) at start, after the HTTP runs and after each round,
    and how many versions it holds loaded (at most TRM_DECIDE_CACHE)."""
    import asyncio
    import os
    import socket

    import httpx
    from sqlmodel import Session

    from core.db import make_engine, upgrade
    from core.models import Controller, ControllerVersion

    url = f"sqlite:///{workdir / 'registry.db'}"
    (workdir / "registry.db").unlink(missing_ok=True)
    upgrade(url)
    with Session(make_engine(url)) as session:
        for trainer, folder in trained.items():
            name = f"bench-{trainer}"
            session.add(
                ControllerVersion(
                    name=name,
                    version=1,
                    run_id=name,
                    source_run_id=name,
                    trainer=trainer,
                    trainer_dir=str(folder.relative_to(workdir)),
                    promoted_by="bench/decide.py",
                )
            )
            session.add(Controller(name=name, live_version=1))
        models = list(trained.items())
        for k in range(versions):
            trainer, folder = models[k % len(models)]
            session.add(
                ControllerVersion(
                    name="bench-many",
                    version=k + 1,
                    run_id=f"many-{k}",
                    source_run_id=f"many-{k}",
                    trainer=trainer,
                    trainer_dir=str(folder.relative_to(workdir)),
                    promoted_by="bench/decide.py",
                )
            )
        if versions:
            session.add(Controller(name="bench-many", live_version=versions))
        session.commit()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "TRM_DATABASE_URL": url, "TRM_RUNS_DIR": str(workdir)}
    env.pop("TRM_API_TOKEN", None)
    log = (workdir / "decide-server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "decide-server"]
        + ["--port", str(port), "--workers", str(workers)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"decide-server did not start: {workdir / 'decide-server.log'}")
            time.sleep(0.2)
        memory: dict[str, Any] = {"start_mb": _rss_mb(server.pid)}
        bodies = [{"state": r.state, "tools": r.tools} for r in rows]
        results = []
        for trainer in trained:
            for count in clients:
                name = f"bench-{trainer}"
                cpu, served = time.process_time(), _cpu_s(server.pid)
                spent = asyncio.run(_load(base, name, bodies, count, seconds, client))
                cpu = time.process_time() - cpu  # the clients' own: this process runs them
                served = _cpu_s(server.pid) - served  # the decision process's
                per = sorted(spent)
                results.append(
                    {
                        "trainer": trainer,
                        "clients": count,
                        "client": client,
                        "client_cpu_ms": round(cpu / max(1, len(per)) * 1000, 3),
                        "server_cpu_ms": round(served / max(1, len(per)) * 1000, 3),
                        "requests": len(per),
                        "per_s": round(len(per) / seconds, 1),
                        "p50_ms": round(statistics.median(per) * 1000, 3),
                        "p99_ms": round(per[min(len(per) - 1, int(0.99 * len(per)))] * 1000, 3),
                    }
                )
        memory["after_http_mb"] = _rss_mb(server.pid)
        memory.update(_round_robin(base, server.pid, bodies, versions, rounds))
        return results, memory
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: what else wanted the CPU."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _tree(pid: int) -> list[int]:
    """A process and its children (`--workers` above 1: uvicorn's processes under its own)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = children.read_text().split() if children.exists() else []
    return [pid, *(int(c) for c in found)]


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (user and system, all its threads), with its children's, in
    seconds."""
    ticks = 0
    for each in _tree(pid):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS) with its children's, in MiB."""
    kib = 0
    for each in _tree(pid):
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                kib += int(line.split()[1])
    return round(kib / 1024, 1) if kib else float("nan")


def _round_robin(
    base: str, pid: int, bodies: list[dict[str, Any]], versions: int, rounds: int
) -> dict[str, Any]:
    """`rounds` passes over `bench-many`'s versions, one one-row call each: RSS after each."""
    import httpx

    if not versions:
        return {}
    after: list[float] = []
    with httpx.Client(base_url=base, timeout=120) as http:
        for _ in range(rounds):
            for k in range(versions):
                body = {"controller": f"bench-many@{k + 1}", "rows": [bodies[k % len(bodies)]]}
                http.post("/decide", json=body).raise_for_status()
            after.append(_rss_mb(pid))
        loaded = len(http.get("/healthz").json()["loaded"])
    return {"versions": versions, "rounds_mb": after, "loaded": loaded}


async def _load(
    base: str,
    name: str,
    bodies: list[dict[str, Any]],
    clients: int,
    seconds: float,
    client: str = "raw",
) -> list[float]:
    """Each client sends one-row requests back to back on its own connection for `seconds`
    (after one request each to open the connection); each request's round trip in seconds.
    `client` "raw": HTTP/1.1 written and read on an asyncio stream (keep-alive, the request
    bytes made beforehand), so the clients' own CPU, on the server's cores, stays small;
    "httpx": an `httpx.AsyncClient` each, as a Python caller would (several times the CPU a
    request)."""
    import asyncio

    spent: list[float] = []
    ready = asyncio.Event()
    stop = float("inf")
    send = _raw_client if client == "raw" else _httpx_client

    requests = [json.dumps({"controller": name, "rows": [b]}).encode() for b in bodies]

    async def one(k: int) -> None:
        async with send(base) as post:
            await post(requests[k % len(requests)])
            await ready.wait()
            i = k
            while time.monotonic() < stop:
                started = time.perf_counter()
                await post(requests[i % len(requests)])
                spent.append(time.perf_counter() - started)
                i += clients

    tasks = [asyncio.create_task(one(k)) for k in range(clients)]
    await asyncio.sleep(0.5)
    stop = time.monotonic() + seconds
    ready.set()
    await asyncio.gather(*tasks)
    return spent


@contextlib.asynccontextmanager
async def _raw_client(base: str) -> AsyncIterator[Callable[[bytes], Awaitable[None]]]:
    """One keep-alive connection; `post(body)` sends `POST /decide` with that JSON body and
    reads the whole answer, raising on any status but 200."""
    import asyncio

    host, _, port = base.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"POST /decide HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"

    async def post(data: bytes) -> None:
        writer.write(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
        status = await reader.readuntil(b"\r\n")
        length = 0
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                length = int(value)
        answer = await reader.readexactly(length)
        if status.split()[1] != b"200":
            raise RuntimeError(f"decide answered {status.decode().strip()}: {answer[:200]!r}")

    try:
        yield post
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def _httpx_client(base: str) -> AsyncIterator[Callable[[bytes], Awaitable[None]]]:
    import httpx

    limits = httpx.Limits(max_connections=1)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:

        async def post(data: bytes) -> None:
            (await http.post("/decide", content=data, headers=headers)).raise_for_status()

        yield post
