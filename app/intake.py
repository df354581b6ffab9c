"""Group commit for arriving runs: how `POST /runs` records and queues (SPEC §10, §11).

Each request hands its body to the intake and awaits its own outcome. A free writer (one of
`TRM_INTAKE_WRITERS` drain tasks) takes everything that has arrived and, in one trip to the
threadpool, validates each submission, records the valid ones in one transaction with their first
events, and queues them in one Redis round trip. While the writers are busy the next batch
gathers, so under load the fixed costs of a write (thread hand-off, connection check-out, commit,
fan-out, enqueue) are shared by all the requests that arrived meanwhile; alone, a request is its
own batch and waits for nobody. Several writers let one batch's file appends (a new run's
directory and events.jsonl) and Redis calls overlap another's database work.

Outcomes stay per request: a 422 or a 409 belongs to its own submission and never fails the
others; only what fails the whole write (the database is down) is every request's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import anyio

from core.errors import ApiError
from core.events import Publisher
from core.models import Run
from core.runs import prepare_run, submit_runs
from core.settings import Settings

log = logging.getLogger("trm.api")
Outcome = tuple[Run, bool] | BaseException
SHUTTING_DOWN = ApiError(503, "unavailable", "the API is shutting down; submit the run again")
CUT_OFF = ApiError(
    503,
    "unavailable",
    "the API shut down while recording this run: it may exist; submit it again with the same "
    "Idempotency-Key, or look for it with GET /runs",
)


@dataclass
class Submission:
    body: Any
    idempotency_key: str | None
    parent_id: str | None
    answer: asyncio.Future[tuple[Run, bool]]


class Intake:
    def __init__(self, publisher: Publisher, settings: Settings, max_batch: int = 256) -> None:
        self.publisher, self.settings, self.max_batch = publisher, settings, max_batch
        self._waiting: list[Submission] = []
        self._arrived = asyncio.Event()
        self._writers: list[asyncio.Task[None]] = []
        self._writing = 0  # batches in the threadpool now

    def start(self) -> None:
        self._writers = [
            asyncio.create_task(self._drain(), name=f"trm-intake-{i}")
            for i in range(self.settings.intake_writers)
        ]

    async def stop(self) -> None:
        """Finish what has arrived and what is being written (for up to 10 s), then end the
        writers: a request whose run was recorded gets its 202, not a 503."""
        deadline = asyncio.get_running_loop().time() + 10.0
        while (self._waiting or self._writing) and self._taking():
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        for task in self._writers:
            task.cancel()
        for task in self._writers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._writers = []
        self._answer_all(self._waiting, SHUTTING_DOWN)
        self._waiting = []

    def _taking(self) -> bool:
        return any(not task.done() for task in self._writers)

    async def submit(
        self, body: Any, idempotency_key: str | None, parent_id: str | None = None
    ) -> tuple[Run, bool]:
        """(run, created) once the run is recorded and queued, or the submission's own error."""
        if not self._taking():
            raise ApiError(503, "unavailable", "the API is not taking runs (starting or stopping)")
        answer: asyncio.Future[tuple[Run, bool]] = asyncio.get_running_loop().create_future()
        self._waiting.append(Submission(body, idempotency_key, parent_id, answer))
        self._arrived.set()
        return await answer

    async def _drain(self) -> None:
        while True:
            while not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
            while self._waiting:
                batch = self._waiting[: self.max_batch]
                del self._waiting[: self.max_batch]
                # A client that hung up before its turn: nothing of it is written.
                batch = [s for s in batch if not s.answer.done()]
                if not batch:
                    continue
                self._writing += 1
                try:
                    outcomes: list[Outcome] = await anyio.to_thread.run_sync(self._write, batch)
                except asyncio.CancelledError:  # stopped mid-write, after stop()'s 10 s
                    self._answer_all(batch, CUT_OFF)
                    raise
                except Exception as exc:  # the whole write failed: every request's answer
                    outcomes = [exc] * len(batch)
                finally:
                    self._writing -= 1
                for submission, outcome in zip(batch, outcomes, strict=True):
                    self._answer(submission, outcome)

    def _write(self, batch: list[Submission]) -> list[Outcome]:
        """In a thread: validate each, then record and queue the valid ones together."""
        outcomes: list[Outcome | None] = [None] * len(batch)
        valid: list[tuple[int, Run]] = []
        for i, s in enumerate(batch):
            try:
                valid.append(
                    (i, prepare_run(self.settings, s.body, s.idempotency_key, s.parent_id))
                )
            except Exception as exc:  # this submission's own error (a 422)
                outcomes[i] = exc
        if valid:
            recorded = submit_runs(self.publisher, self.settings, [run for _, run in valid])
            for (i, _), outcome in zip(valid, recorded, strict=True):
                outcomes[i] = outcome
        return [o for o in outcomes if o is not None]

    @staticmethod
    def _answer(submission: Submission, outcome: Outcome) -> None:
        if submission.answer.done():
            return
        if isinstance(outcome, BaseException):
            submission.answer.set_exception(outcome)
        else:
            submission.answer.set_result(outcome)

    def _answer_all(self, batch: list[Submission], error: BaseException) -> None:
        for submission in batch:
            self._answer(submission, error)
