"""/runs/{id}/events (SSE) and /runs/{id}/card (SPEC §9).

The stream replays from the database after `Last-Event-ID` (or `?after=`), a page at a time, then
follows the live channel. Per run, event ids and `seq` both grow in commit order (core/events.py),
so a follower drops what it has seen and reads the database again whenever `seq` jumps: no gap,
no duplicate.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlmodel import Session, col, select

from app.deps import AppState, session, state
from app.live import FRAME, PING, RESYNC, TICK, sse_frame
from core.card import Card, render_text
from core.errors import ApiError
from core.events import events_after_seq
from core.models import TERMINAL_STATUSES, Event, Run
from core.notify import NotifyConfig, settles_within_s
from core.runs import get_run

router = APIRouter(tags=["events"])


class EventStream(StreamingResponse):
    """text/event-stream of encoded frames; keep-alive comments are frames too (`follow`)."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], status_code: int = 200) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(frames, status_code=status_code, headers=headers)


# Replay reads and sends this many stored events at a time: a stream holds one page in memory,
# however long the run's history (a 300k-event run once cost 323 MiB before the first byte).
PAGE = 1000
# Event ids are Postgres BIGINTs: a larger `Last-Event-ID` or `after` cannot name an event.
MAX_EVENT_ID = 2**63 - 1
# ASCII digits only: str.isdigit() and int() also take `²` and other Unicode digits.
EVENT_ID = re.compile(r"[0-9]{1,19}")
TAIL_MAX = 10_000


def _page(app: AppState, run_id: str, after_seq: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to PAGE stored events after `after_seq`, oldest first, and whether the run had ended
    before they were read (its status is read first: an ended run's terminal event is then among
    them, unless the client is past it)."""
    with Session(app.engine) as db:
        status = db.exec(select(Run.status).where(Run.id == run_id)).first()
        return events_after_seq(db, run_id, after_seq, PAGE), status in TERMINAL_STATUSES


def _start_seq(app: AppState, run_id: str, after_id: int | None, tail: int | None) -> int:
    """Where the stream starts, as a `seq`: after the event with id `after_id` (the client's
    `Last-Event-ID`), or before the run's last `tail` events; 404 for an unknown run."""
    with Session(app.engine) as db:
        run = get_run(db, run_id)
        if after_id is None:
            return max(0, run.event_seq - tail) if tail is not None else 0
        seq = db.exec(
            select(Event.seq)
            .where(Event.run_id == run_id, col(Event.id) <= after_id)
            .order_by(col(Event.id).desc())
            .limit(1)
        ).first()
        return seq or 0


def _is_terminal(ev: dict[str, Any]) -> bool:
    return ev["type"] == "status" and ev["data"].get("status") in TERMINAL_STATUSES


# Past the longest a delivery can take: the worker that delivers may have died mid-way.
NOTIFY_SLACK_S = 15.0


class _End:
    """Where a stream ends: at the terminal `status` event, or, for a run whose spec names
    `notify.url`, at the webhook attempt that settles its delivery (`log`, `settled`), so a
    follower sees the attempts; never later than the longest a delivery can take after the
    terminal event. The terminal event stays the last `status` event either way."""

    def __init__(self, app: AppState, run_id: str) -> None:
        self.app, self.run_id = app, run_id
        self.deadline: float | None = None  # epoch seconds; set once the terminal event is seen

    def _webhook_deadline(self, ev: dict[str, Any]) -> float | None:
        with Session(self.app.engine) as db:
            spec = db.exec(select(Run.spec).where(Run.id == self.run_id)).first() or {}
        if not (spec.get("notify") or {}).get("url"):
            return None
        config = NotifyConfig.of(self.app.settings)
        ts = ev.get("ts")
        start = datetime.fromisoformat(ts).timestamp() if ts else time.time()
        deadline = start + settles_within_s(config) + NOTIFY_SLACK_S
        return deadline if deadline > time.time() else None

    async def after(self, ev: dict[str, Any]) -> bool:
        """True when `ev` is the stream's last event."""
        if self.deadline is not None:
            data = ev["data"]
            return (
                ev["type"] == "log" and data.get("source") == "notify" and bool(data.get("settled"))
            )
        if not _is_terminal(ev):
            return False
        self.deadline = await run_in_threadpool(self._webhook_deadline, ev)
        return self.deadline is None

    def waiting(self) -> bool:
        return self.deadline is not None

    def expired(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline


def _sse(ev: dict[str, Any]) -> bytes:
    return ev.get(FRAME) or sse_frame(ev)


async def follow(app: AppState, run_id: str, after_seq: int) -> AsyncIterator[bytes]:
    """Replay from the database a page at a time, then follow the live channel; back to the
    database whenever `seq` jumps (Redis dropped something) or a quiet period ends."""
    end = _End(app, run_id)
    async with app.hub.subscribe(run_id) as queue:  # subscribe first: the replay overlaps it
        last_seq = after_seq
        quiet = False  # nothing sent since the last tick
        while True:
            if end.expired():
                return
            while True:  # catch up from the database, one page in memory at a time
                page, ended = await run_in_threadpool(_page, app, run_id, last_seq)
                for ev in page:
                    yield _sse(ev)
                    last_seq, quiet = ev["seq"], False
                    if await end.after(ev):
                        return
                if len(page) < PAGE:
                    break
            if ended and not end.waiting():
                return  # ended before we read, no terminal event after `after`: the client has it
            while True:  # live, as long as `seq` follows on
                item = await queue.get()
                if item is TICK:
                    if not quiet:
                        quiet = True
                        continue
                    yield PING  # quiet for a whole period: keep the connection, and make sure
                    break  # Redis did not drop anything
                if item is RESYNC or item["seq"] > last_seq + 1:
                    break
                if item["seq"] <= last_seq:
                    continue
                yield _sse(item)
                last_seq, quiet = item["seq"], False
                if await end.after(item):
                    return


def _event_id(value: str, field: str) -> int:
    """A client's event id: ASCII digits naming a BIGINT, else a 422 naming `field`."""
    text = value.strip()
    if not EVENT_ID.fullmatch(text) or int(text) > MAX_EVENT_ID:
        raise ApiError(
            422,
            "validation_error",
            f"{field}: must be an event id (ASCII digits, 0 to {MAX_EVENT_ID})",
            [{"field": field, "message": "not an event id"}],
        )
    return int(text)


@router.get("/runs/{run_id}/events", response_class=EventStream, summary="Follow a run's events")
async def run_events(
    run_id: str,
    app: Annotated[AppState, Depends(state)],
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="start after this event id")
    ] = None,
    tail: Annotated[
        int | None, Query(ge=0, le=TAIL_MAX, description="start at the run's last N events")
    ] = None,
    last_event_id: Annotated[
        str | None, Header(description="a reconnecting client's last event id: resume after it")
    ] = None,
) -> EventStream:
    """Server-sent events: every event of the run after `Last-Event-ID` (or `?after=`), or only
    its last `?tail=N` stored ones (the dashboard's first connection), then live ones, with a
    keep-alive comment; the stream ends after the terminal `status` event (for a run with a
    webhook: after the delivery attempt that settles it). Event types: `status`, `card`, `metric`,
    `log`, `ledger`; no gap and no duplicate across reconnects."""
    after_id = after
    if last_event_id is not None and last_event_id.strip():
        after_id = max(after or 0, _event_id(last_event_id, "Last-Event-ID"))
    start = await run_in_threadpool(_start_seq, app, run_id, after_id, tail)
    return EventStream(follow(app, run_id, start))


def card_of(run: Run) -> Card:
    data = dict(run.card or {})
    data.update(run_id=run.id, kind=run.kind, status=run.status, attempt=run.attempt)
    if run.status in TERMINAL_STATUSES and run.status == "completed":
        data["percent"] = 100.0
    return Card(**{k: v for k, v in data.items() if k in Card.model_fields})


@router.get("/runs/{run_id}/card", response_model=Card, summary="A run's card")
def run_card(
    run_id: str,
    db: Annotated[Session, Depends(session)],
    format: Annotated[
        str, Query(pattern="^(json|text)$", description="`text`: the fixed-width box")
    ] = "json",
) -> Any:
    """The latest status card (what `trm show` and `trm watch` print): status, stage, progress,
    ETA, best anchor score, RAM; JSON, or `?format=text` for the fixed-width box."""
    card = card_of(get_run(db, run_id))
    if format == "text":
        return PlainTextResponse(render_text(card) + "\n")
    return card
