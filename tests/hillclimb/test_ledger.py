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


def test_a_reused_and_an_untrained_like_candidate_say_so_in_the_ledger(migrated: Settings) -> None:
    publisher, search_id = _search(migrated)
    ledger = Ledger(publisher, search_id, migrated.run_dir(search_id))
    ledger.record(
        "c000",
        "finished",
        rung=3,
        status="completed",
        decision="discard",
        anchor_score=0.2887,
        untrained_score=0.2887,
        untrained_like=True,
    )
    ledger.record(
        "c001",
        "finished",
        rung=3,
        status="completed",
        decision="discard",
        anchor_score=0.2887,
        reused_from="01J0000000000000000000RUN0",
    )
    ledger.record("skip1", "not_tried", rung=3, status="not_tried", reason="cannot change")
    rows = {r["candidate_id"]: r for r in ledger.rows()}
    assert rows["c000"]["untrained_like"] is True and rows["c000"]["untrained_score"] == 0.2887
    assert rows["c001"]["reused_from"] == "01J0000000000000000000RUN0"
    assert rows["skip1"]["status"] == "not_tried"
    lines = [json.loads(line) for line in ledger.path.read_text().splitlines()]
    assert lines == ledger.rows()
