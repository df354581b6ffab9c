"""Calls served together in the decision process (worker/decide/server.py): calls that arrive
while it serves others wait, and are then served in one trip to a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread

from core.routing import Routing
from worker.decide.controller import Controller, DecideRow, Decision


@dataclass
class Call:
    """One `/decide` call waiting for the dispatcher: what it asks and where its answer goes."""

    name: str
    version: int | None
    rows: list[DecideRow]
    answer: asyncio.Future[Answered]


@dataclass(frozen=True)
class Answered:
    """A call's routing, its loaded version and its decisions (None for a call with a shadow
    version: the handler decides it with both at once)."""

    routing: Routing
    controller: Controller
    decisions: list[Decision] | None


# Each call's answer or the error it gets, in the calls' order.
Serve = Callable[[list[Call]], list[Answered | Exception]]


class Dispatcher:
    """Every call that arrives while the process is serving others waits, and then all of them
    are served in one trip to a worker thread (`serve`: the decision process's
    `DecideService.serve`): their names resolved
    (one query a name, started after each of those calls arrived, so a promotion committed
    before a call is seen by it), their versions loaded, their rows checked and decided, a
    version's calls together in forwards of up to `BATCH_ROWS` rows. A lone call is served at
    once. Runs on the event loop."""

    def __init__(self, serve: Serve) -> None:
        self.serve = serve
        self._waiting: list[Call] = []
        self._running = False

    async def decide(self, name: str, version: int | None, rows: list[DecideRow]) -> Answered:
        answer: asyncio.Future[Answered] = asyncio.get_running_loop().create_future()
        self._waiting.append(Call(name, version, rows, answer))
        if not self._running:
            self._running = True
            asyncio.create_task(self._drain())
        return await answer

    async def _drain(self) -> None:
        try:
            while self._waiting:
                calls, self._waiting = self._waiting, []
                try:
                    outcomes = await anyio.to_thread.run_sync(self.serve, calls)
                except Exception as exc:  # every call of the round gets it
                    outcomes = [exc] * len(calls)
                for call, outcome in zip(calls, outcomes, strict=True):
                    if call.answer.done():  # a call whose client left is cancelled
                        continue
                    if isinstance(outcome, Exception):
                        call.answer.set_exception(outcome)
                    else:
                        call.answer.set_result(outcome)
        finally:
            self._running = False
