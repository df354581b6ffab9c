"""The ledger on SQLite and Postgres: one row per (candidate, event), a file that matches."""

from __future__ import annotations

import json

from sqlmodel import select

from core.db import make_engine
from core.events import Publisher
from core.models import Event, Run
from core.settings import Settings
from worker.hillclimb.ledger import Ledger


def _search(settings: Settings) -> tuple[Publisher, str]:
    publisher = Publisher(make_engine(settings.database_url), None, settings)
    run = Run(kind="hillclimb", status="running", queue="cpu", spec={}, spec_hash="x")
    with publisher.transaction() as tx:
        tx.add_run(run, {"status": "running"})
    return publisher, run.id


def test_an_event_recorded_twice_leaves_one_row_and_one_line(migrated: Settings) -> None:
    publisher, search_id = _search(migrated)
    ledger = Ledger(publisher, search_id, migrated.run_dir(search_id))
    first = ledger.record("c000", "proposed", rung=2, knobs={"a": 1}, status="proposed")
    again = ledger.record("c000", "proposed", rung=2, knobs={"a": 1}, status="proposed")
    ledger.record("c000", "launched", rung=2, run_id="R", status="queued")
    assert first is not None and again is None
    assert [(r["seq"], r["event"]) for r in ledger.rows()] == [(1, "proposed"), (2, "launched")]
    lines = [json.loads(line) for line in ledger.path.read_text().splitlines()]
    assert lines == ledger.rows()
    with publisher.transaction() as tx:
        events = tx.session.exec(select(Event).where(Event.run_id == search_id)).all()
    assert [e.data["event"] for e in events if e.type == "ledger"] == ["proposed", "launched"]


def test_a_line_lost_in_a_crash_is_restored_on_open(migrated: Settings) -> None:
    publisher, search_id = _search(migrated)
    ledger = Ledger(publisher, search_id, migrated.run_dir(search_id))
    for cid in ("c000", "c001"):
        ledger.record(cid, "proposed", rung=0, status="proposed")
    kept = ledger.path.read_text().splitlines()[0]
    ledger.path.write_text(kept + "\n" + '{"torn": ')  # the second line never made it
    rows = Ledger(publisher, search_id, migrated.run_dir(search_id)).open()
    lines = [
        json.loads(line) for line in ledger.path.read_text().splitlines() if "torn" not in line
    ]
    assert (
        sorted(r["candidate_id"] for r in lines)
        == ["c000", "c001"]
        == [r["candidate_id"] for r in rows]
    )
