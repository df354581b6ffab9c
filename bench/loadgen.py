"""The load generator of bench/load.py, kept cheap because it shares the machine with what it
measures: a bare HTTP/1.1 client, the open-loop `POST /runs` lanes, SSE subscribers, and the
publisher of the watched runs' events. What they see goes into a `Phase`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

SPEC = json.dumps({"kind": "selftest", "dry_run": True}).encode()
REQUEST_TIMEOUT_S = 30.0
ATTACH_TIMEOUT_S = 30.0


@dataclass
class Phase:
    """One database's round: where it is, and what the generator, the subscribers and the
    publisher counted."""

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
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.port, len(body), body)
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


# --- the load ---------------------------------------------------------------------------------


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
                f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
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
