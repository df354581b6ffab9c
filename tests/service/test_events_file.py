"""A run's `events.jsonl` agrees with its status: the events a transaction emits are in the file
by the time a reader can see the transaction committed (they were appended just after, so a
client that saw `completed` could read the file without it), and a commit that fails leaves no
line of them behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlmodel import Session

from core.db import get_engine
from core.events import Publisher
from core.runs import submit_run
from core.settings import Settings

pytestmark = pytest.mark.parametrize("database_url", ["sqlite", "postgres"], indirect=True)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_file_holds_a_transactions_events_when_its_commit_is_seen(migrated: Settings) -> None:
    publisher = Publisher(get_engine(migrated), None, migrated)
    run, _ = submit_run(publisher, migrated, {"kind": "selftest", "steps": 1}, None, queue=False)
    path = migrated.run_dir(run.id) / "events.jsonl"
    seen_at_commit: list[list[int]] = []

    def committed(session: Session) -> None:  # the moment any reader can see the new status
        seen_at_commit.append([int(e["seq"]) for e in _lines(path)])  # type: ignore[call-overload]

    sa_event.listen(Session, "after_commit", committed)
    try:
        with publisher.transaction() as tx:
            tx.emit(run.id, "log", {"message": "checkpoint"})
    finally:
        sa_event.remove(Session, "after_commit", committed)
    assert seen_at_commit and seen_at_commit[-1][-1] == 2, seen_at_commit


def test_a_failed_commit_leaves_no_line_of_its_events(migrated: Settings) -> None:
    publisher = Publisher(get_engine(migrated), None, migrated)
    run, _ = submit_run(publisher, migrated, {"kind": "selftest", "steps": 1}, None, queue=False)
    path = migrated.run_dir(run.id) / "events.jsonl"
    before = path.read_bytes()

    def refuse(session: Session) -> None:
        raise sa.exc.OperationalError("COMMIT", {}, Exception("the database went away"))

    sa_event.listen(Session, "before_commit", refuse)
    try:
        with pytest.raises(sa.exc.OperationalError), publisher.transaction() as tx:
            tx.emit(run.id, "log", {"message": "never committed"})
    finally:
        sa_event.remove(Session, "before_commit", refuse)
    assert path.read_bytes() == before
    with publisher.transaction() as tx:
        tx.emit(run.id, "log", {"message": "committed"})
    assert [e["seq"] for e in _lines(path)] == [1, 2]
