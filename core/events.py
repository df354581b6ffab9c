"""The one event publisher (SPEC §9): store the event, append it to the run's events.jsonl, and
fan it out over Redis pub/sub.

Ordering: an event's `seq` comes from `UPDATE runs SET event_seq = event_seq + 1 ... RETURNING`,
which takes the run's row lock until commit. So for one run, commit order equals both `seq` and
`id` order, on SQLite and on Postgres: a follower that has seen id N never later meets a smaller
id for the same run, and a jump in `seq` means it missed something and must read the database.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
from sqlmodel import Session, col, select

from core.db import as_utc, one_writer, retrying, session_scope
from core.models import Event, Run, utcnow
from core.redisconn import events_channel
from core.settings import Settings

log = logging.getLogger("trm.events")

RUNS: sa.Table = Run.__table__  # type: ignore[attr-defined]
EVENTS: sa.Table = Event.__table__  # type: ignore[attr-defined]
EVENT_TYPES = ("status", "stage", "card", "metric", "ledger", "log")

# Called with (publisher, the stored event) after a run's terminal `status` event is committed,
# in the process that recorded it. Webhooks register here (core/notify.py), so this module need
# not know them.
TerminalHook = Callable[["Publisher", dict[str, Any]], object]
TERMINAL_HOOKS: list[TerminalHook] = []


def on_terminal_status(hook: TerminalHook) -> TerminalHook:
    """Register `hook` for every terminal status (once per hook, however often it is called)."""
    if hook not in TERMINAL_HOOKS:
        TERMINAL_HOOKS.append(hook)
    return hook


def finite(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None: an event is strict JSON on every
    database. Postgres refuses `NaN` in a JSON column (a diverged loss once failed its run with
    the SQL text as the reason); SQLite stores it, and a reader that parses JSON strictly (the
    dashboard's) then fails on the event and reconnects forever."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def event_dict(ev: Event) -> dict[str, Any]:
    created = as_utc(ev.created_at)
    return {
        "id": ev.id,
        "run_id": ev.run_id,
        "seq": ev.seq,
        "type": ev.type,
        "data": ev.data,
        "ts": created.isoformat() if created else None,
    }


class LeaseLost(Exception):
    """A fenced publisher's run now belongs to a later attempt: its events are refused."""


@dataclass
class Tx:
    """A database transaction that can emit events; they fan out only after it commits. With a
    `fence` (a lease token), an event is stored only while the run's lease still has it."""

    session: Session
    emitted: list[Event] = field(default_factory=list)
    fence: int | None = None

    def emit(self, run_id: str, type: str, data: dict[str, Any]) -> Event:
        assert type in EVENT_TYPES, type
        data = finite(data)
        values: dict[str, Any] = {"event_seq": Run.event_seq + 1}
        if type == "card":
            values.update(
                card=data,
                phase=data.get("phase"),
                percent=data.get("percent") or 0.0,
                best_anchor=data.get("best_anchor"),
            )
        update = sa.update(Run).where(col(Run.id) == run_id)
        if self.fence is not None:
            update = update.where(col(Run.lease_token) == self.fence)
        seq = self.session.execute(
            update.values(**values).returning(col(Run.event_seq))
        ).scalar_one_or_none()
        if seq is None:
            raise LeaseLost(run_id)
        ev = Event(run_id=run_id, seq=seq, type=type, data=data, created_at=utcnow())
        self.session.add(ev)
        self.session.flush()
        self.emitted.append(ev)
        return ev

    def add_runs(self, runs: list[tuple[Run, dict[str, Any]]]) -> list[Event]:
        """Insert new runs, each with its first event (`status`, seq 1): no row to lock yet.

        Two Core INSERTs for the lot rather than the ORM's unit of work: this is the hot path of
        `POST /runs` (the API records concurrent submissions together), and the flush machinery
        cost more than the SQL itself. Each run stays a plain (transient) object holding what
        was written."""
        if not runs:
            return []
        now, events = utcnow(), []
        for run, data in runs:
            run.event_seq = 1
            events.append(
                Event(run_id=run.id, seq=1, type="status", data=finite(data), created_at=now)
            )
        conn = self.session.connection()
        run_columns = [c.name for c in RUNS.columns]
        conn.execute(RUNS.insert(), [{c: getattr(run, c) for c in run_columns} for run, _ in runs])
        event_columns = [c.name for c in EVENTS.columns if c.name != "id"]
        rows = [{c: getattr(ev, c) for c in event_columns} for ev in events]
        ids = conn.execute(
            EVENTS.insert().returning(EVENTS.c.id, sort_by_parameter_order=True), rows
        ).scalars()
        for ev, id_ in zip(events, ids, strict=True):
            ev.id = id_
        self.emitted.extend(events)
        return events

    def add_run(self, run: Run, data: dict[str, Any]) -> Event:
        return self.add_runs([(run, data)])[0]


class Publisher:
    """`fence` and `on_fenced`: a stage's child process publishes under its attempt's lease token;
    once the run has moved to a later attempt (this worker froze, another took over) its events
    are dropped, never interleaved with the new attempt's, and `on_fenced()` is called."""

    def __init__(
        self,
        engine: sa.Engine,
        redis_client: redis.Redis | None,
        settings: Settings,
        retry_s: float = 0.0,
        fence: int | None = None,
        on_fenced: Callable[[], None] | None = None,
    ):
        self.engine, self.redis, self.settings = engine, redis_client, settings
        self.retry_s = retry_s  # workers: settings.db_retry_s; the API: 0 (it answers 503)
        self.fence, self.on_fenced = fence, on_fenced

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """The events a transaction emits go to `events.jsonl` before it commits, while it holds
        their runs' rows: a reader who sees the transaction's status (say `completed`) finds its
        events in the file too, and a commit that fails takes them back out. Redis and the
        terminal hooks hear of them after the commit."""
        tx: Tx
        appended: list[tuple[Path, int]] = []
        try:
            with one_writer(self.engine), session_scope(self.engine) as session:
                tx = Tx(session, fence=self.fence)
                yield tx
                lines = self._encode(tx.emitted)
                appended = self._append_jsonl(lines)
        except BaseException:
            for path, size in appended:
                _truncate(path, size)
            raise
        self.fan_out(tx.emitted, lines)

    def publish(self, run_id: str, type: str, data: dict[str, Any]) -> dict[str, Any]:
        """The stored event; `{}` when a fenced publisher's lease has moved on."""

        def once() -> Event:
            with self.transaction() as tx:
                return tx.emit(run_id, type, data)

        try:
            return event_dict(retrying(once, self.retry_s, f"{type} event of {run_id}"))
        except LeaseLost:
            if self.on_fenced is None:
                raise
            self.on_fenced()
            return {}

    def run_events(self, run_id: str, type: str) -> list[dict[str, Any]]:
        """The data of a run's stored events of one type, oldest first (read, never fenced)."""
        with Session(self.engine) as session:
            rows = session.exec(
                select(Event.data)
                .where(Event.run_id == run_id, Event.type == type)
                .order_by(col(Event.id))
            ).all()
        return [dict(data) for data in rows]

    @staticmethod
    def _encode(events: list[Event]) -> dict[str, list[str]]:
        """Each event encoded once, by run: the same line goes to events.jsonl and to Redis."""
        by_run: dict[str, list[str]] = {}
        for ev in events:
            line = json.dumps(event_dict(ev), separators=(",", ":"), allow_nan=False)
            by_run.setdefault(ev.run_id, []).append(line)
        return by_run

    def fan_out(self, events: list[Event], by_run: dict[str, list[str]]) -> None:
        messages: list[tuple[str, str]] = []
        for run_id, lines in by_run.items():
            channel = events_channel(self.settings, run_id)
            messages += [(channel, line) for line in lines]
        self._publish_redis(messages)
        for ev in events:
            if ev.type == "status" and ev.data.get("terminal"):
                for hook in TERMINAL_HOOKS:
                    try:
                        hook(self, event_dict(ev))
                    except Exception as exc:  # a hook never stands in the way of a status
                        log.warning("terminal hook for %s failed: %s", ev.run_id, exc)

    def _append_jsonl(self, by_run: dict[str, list[str]]) -> list[tuple[Path, int]]:
        """Appends each run's lines; (file, its size before) for each file written."""
        written: list[tuple[Path, int]] = []
        for run_id, lines in by_run.items():
            run_dir = self.settings.run_dir(run_id)
            path = run_dir / "events.jsonl"
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                with open(path, "ab") as fh:
                    size = fh.tell()
                    fh.write("".join(line + "\n" for line in lines).encode("utf-8"))
                written.append((path, size))
            except OSError as exc:  # the database copy is the record; the file a convenience
                log.warning("could not append events.jsonl for %s: %s", run_id, exc)
        return written

    def _publish_redis(self, messages: list[tuple[str, str]]) -> None:
        if self.redis is None or not messages:
            return
        try:
            if len(messages) <= 2:  # a redis-py pipeline costs ten times a PUBLISH for 1-2
                for channel, message in messages:
                    self.redis.publish(channel, message)
                return
            pipe = self.redis.pipeline(transaction=False)
            for channel, message in messages:
                pipe.publish(channel, message)
            pipe.execute()
        except redis.RedisError as exc:  # followers catch up from the database
            log.warning("live fan-out of %d events failed: %s", len(messages), exc)


def _truncate(path: Path, size: int) -> None:
    """Takes back the lines a failed commit had appended (no other writer appends to a run's
    file while its row is locked)."""
    try:
        with open(path, "r+b") as fh:
            fh.truncate(size)
    except OSError as exc:
        log.warning("could not take back events.jsonl lines of %s: %s", path, exc)


def events_after_seq(
    session: Session, run_id: str, after_seq: int = 0, limit: int = 1000
) -> list[dict[str, Any]]:
    """Up to `limit` of a run's events after `after_seq`, oldest first: one keyset page read
    through the (run_id, seq) unique index, so each page costs the same however long the run's
    history (per run, `seq` order is commit order and `id` order)."""
    rows = session.exec(
        select(Event)
        .where(Event.run_id == run_id, col(Event.seq) > after_seq)
        .order_by(col(Event.seq))
        .limit(limit)
    ).all()
    return [event_dict(ev) for ev in rows]
