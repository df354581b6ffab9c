"""bench/decide.py's HTTP part: a real `trm decide-server` on a fresh SQLite registry with each
trained model promoted, one-row requests from concurrent clients (requests/s, p50/p99), and the
decision process's memory with many versions of one name decided round-robin."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
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
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each trained model promoted in a fresh SQLite registry, a `trm decide-server` started on
    it, and one-row requests from `clients` concurrent clients: requests/s, p50/p99 in ms.
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
        [sys.executable, "-m", "app.cli", "decide-server", "--port", str(port)],
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
                spent = asyncio.run(_load(base, f"bench-{trainer}", bodies, count, seconds))
                per = sorted(spent)
                results.append(
                    {
                        "trainer": trainer,
                        "clients": count,
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


def _rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


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
    base: str, name: str, bodies: list[dict[str, Any]], clients: int, seconds: float
) -> list[float]:
    """Each client sends one-row requests back to back on its own connection for `seconds`
    (after one request each to open the connection); each request's round trip in seconds."""
    import asyncio

    import httpx

    spent: list[float] = []

    async def client(k: int) -> None:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
            body = {"controller": name, "rows": [bodies[k % len(bodies)]]}
            (await http.post("/decide", json=body)).raise_for_status()
            await ready.wait()
            i = k
            while time.monotonic() < stop:
                body = {"controller": name, "rows": [bodies[i % len(bodies)]]}
                started = time.perf_counter()
                answer = await http.post("/decide", json=body)
                spent.append(time.perf_counter() - started)
                answer.raise_for_status()
                i += clients

    ready = asyncio.Event()
    stop = float("inf")
    tasks = [asyncio.create_task(client(k)) for k in range(clients)]
    await asyncio.sleep(0.5)
    stop = time.monotonic() + seconds
    ready.set()
    await asyncio.gather(*tasks)
    return spent
