"""/runs/{id}/events (SSE) and /runs/{id}/card (SPEC §9).

The stream replays from the database after `Last-Event-ID` (or `?after=`), then follows the live
channel. Per run, event ids and `seq` both grow in commit order (core/events.py), so a follower
drops what it has seen and reads the database again whenever `seq` jumps: no gap, no duplicate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlmodel import Session, col, select

from app.deps import AppState, session, state
from app.live import FRAME, PING, RESYNC, TICK, sse_frame
from core.card import Card, render_text
from core.errors import ApiError
from core.events import events_after
from core.models import TERMINAL_STATUSES, Event, Run
from core.runs import get_run

router = APIRouter(tags=["events"])


class EventStream(StreamingResponse):
    """text/event-stream of encoded frames; keep-alive comments are frames too (`follow`)."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], status_code: int = 200) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(frames, status_code=status_code, headers=headers)


PAGE = 1000


def _read(app: AppState, run_id: str, after: int) -> tuple[list[dict[str, Any]], bool]:
    """Every stored event after `after` (paged), and whether the run has ended."""
    out: list[dict[str, Any]] = []
    with Session(app.engine) as db:
        while True:
            page = events_after(db, run_id, after, PAGE)
            out.extend(page)
            if len(page) < PAGE:
                break
            after = page[-1]["id"]
        status = db.exec(select(Run.status).where(Run.id == run_id)).first()
        return out, status in TERMINAL_STATUSES


def _seq_of(app: AppState, run_id: str, event_id: int) -> int:
    with Session(app.engine) as db:
        seq = db.exec(
            select(Event.seq)
            .where(Event.run_id == run_id, col(Event.id) <= event_id)
            .order_by(col(Event.id).desc())
            .limit(1)
        ).first()
        return seq or 0


def _is_terminal(ev: dict[str, Any]) -> bool:
    return ev["type"] == "status" and ev["data"].get("status") in TERMINAL_STATUSES


def _sse(ev: dict[str, Any]) -> bytes:
    return ev.get(FRAME) or sse_frame(ev)


async def follow(app: AppState, run_id: str, after: int) -> AsyncIterator[bytes]:
    async with app.hub.subscribe(run_id) as queue:  # subscribe first: the replay overlaps it
        last_id = after
        last_seq = await run_in_threadpool(_seq_of, app, run_id, after) if after else 0
        pending, ended = await run_in_threadpool(_read, app, run_id, after)
        if ended and not any(_is_terminal(ev) for ev in pending):
            pending_ids = [ev for ev in pending if ev["id"] > last_id]
            for ev in pending_ids:
                yield _sse(ev)
            return  # the client already has the terminal event
        quiet = False  # nothing sent since the last tick
        while True:
            for ev in pending:
                if ev["id"] <= last_id:
                    continue
                yield _sse(ev)
                last_id, last_seq, quiet = ev["id"], ev["seq"], False
                if _is_terminal(ev):
                    return
            pending = []
            item = await queue.get()
            if item is TICK:
                if not quiet:
                    quiet = True
                    continue
                yield PING  # quiet for a whole period: keep the connection, and make sure
                item = RESYNC  # Redis did not drop anything
            if item is not RESYNC and item["seq"] <= last_seq:
                continue
            if item is not RESYNC and item["seq"] == last_seq + 1:
                pending = [item]
                continue
            pending, _ = await run_in_threadpool(_read, app, run_id, last_id)


@router.get("/runs/{run_id}/events", response_class=EventStream)
async def run_events(
    run_id: str,
    app: Annotated[AppState, Depends(state)],
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventStream:
    """Server-sent events: every event of the run after `Last-Event-ID` (or `?after=`), then
    live ones, with a keep-alive comment; the stream ends after the terminal `status` event."""
    start = after or 0
    if last_event_id:
        if not last_event_id.strip().isdigit():
            raise ApiError(
                422,
                "validation_error",
                "Last-Event-ID: must be an event id (integer)",
                [{"field": "Last-Event-ID", "message": "not an integer"}],
            )
        start = max(start, int(last_event_id))
    await run_in_threadpool(_exists, app, run_id)
    return EventStream(follow(app, run_id, start))


def _exists(app: AppState, run_id: str) -> None:
    with Session(app.engine) as db:
        get_run(db, run_id)


def card_of(run: Run) -> Card:
    data = dict(run.card or {})
    data.update(run_id=run.id, kind=run.kind, status=run.status, attempt=run.attempt)
    if run.status in TERMINAL_STATUSES and run.status == "completed":
        data["percent"] = 100.0
    return Card(**{k: v for k, v in data.items() if k in Card.model_fields})


@router.get("/runs/{run_id}/card", response_model=Card)
def run_card(
    run_id: str,
    db: Annotated[Session, Depends(session)],
    format: Annotated[str, Query(pattern="^(json|text)$")] = "json",
) -> Any:
    """The latest status card: JSON, or `?format=text` for the fixed-width box."""
    card = card_of(get_run(db, run_id))
    if format == "text":
        return PlainTextResponse(render_text(card) + "\n")
    return card
