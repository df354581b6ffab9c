"""Live fan-out inside the API process: one Redis pattern subscription for every run, handed to
each SSE client's queue. When Redis drops or a client falls behind, its queue gets RESYNC and the
client reads what it missed from the database (the record), so nothing is lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from core.redisconn import async_redis, events_pattern
from core.settings import Settings

log = logging.getLogger("trm.live")
RESYNC: dict[str, Any] = {"type": "__resync__"}
TICK: dict[str, Any] = {"type": "__tick__"}  # every keep-alive period, to every follower
PING = b": ping\r\n\r\n"
FRAME = "__frame__"  # key under which a live event carries its encoded SSE frame
QUEUE_MAX = 5000


def sse_frame(ev: dict[str, Any], data: str | None = None) -> bytes:
    """The event as one server-sent-events frame (`data` is its JSON text, when known). Event
    JSON is compact and ASCII, so it is a single `data:` line."""
    text = data if data is not None else json.dumps(ev, separators=(",", ":"))
    return f"id: {ev['id']}\r\nevent: {ev['type']}\r\ndata: {text}\r\n\r\n".encode()


class LiveHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.subscribers: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self.connected = False
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def count(self) -> int:
        return sum(len(s) for s in self.subscribers.values())

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._tick())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _tick(self) -> None:
        """One timer for every follower, rather than a timeout armed per follower per event."""
        while True:
            await asyncio.sleep(self.settings.sse_keepalive_s)
            for run_id in list(self.subscribers):
                self._deliver(run_id, TICK)

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX)
        self.subscribers.setdefault(run_id, set()).add(queue)
        try:
            yield queue
        finally:
            subs = self.subscribers.get(run_id)
            if subs is not None:
                subs.discard(queue)
                if not subs:
                    self.subscribers.pop(run_id, None)

    def _deliver(self, run_id: str, item: dict[str, Any]) -> None:
        for queue in list(self.subscribers.get(run_id, ())):
            try:
                queue.put_nowait(item)
            except asyncio.QueueFull:  # a slow client: drop its backlog, it re-reads the database
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(RESYNC)

    def _resync_all(self) -> None:
        for run_id in list(self.subscribers):
            self._deliver(run_id, RESYNC)

    async def _listen(self) -> None:
        prefix = events_pattern(self.settings)[:-1]
        while True:
            client: aioredis.Redis | None = None
            try:
                client = async_redis(self.settings)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.psubscribe(events_pattern(self.settings))
                self.connected = True
                self._resync_all()  # anything published while we were away is in the database
                async for message in pubsub.listen():
                    if message.get("type") != "pmessage":
                        continue
                    channel = message["channel"].decode()
                    run_id = channel[len(prefix) :]
                    if run_id in self.subscribers:
                        raw = message["data"].decode()
                        # Parsed and framed once, for however many followers.
                        ev = json.loads(raw)
                        self._deliver(run_id, {**ev, FRAME: sse_frame(ev, raw)})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.connected:
                    log.warning("live fan-out lost Redis: %s", exc)
                self.connected = False
                self._resync_all()
                await asyncio.sleep(0.5)
            finally:
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.aclose()
