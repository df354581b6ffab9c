"""The publisher: per run, `seq` is contiguous and ids grow in commit order, even with many
writers at once (on SQLite and Postgres)."""

from __future__ import annotations

import threading

from sqlmodel import Session, col, select

from core.db import make_engine
from core.events import Publisher
from core.models import Event, Run
from core.settings import Settings


def test_concurrent_publishers_keep_seq_contiguous_and_ordered(migrated: Settings) -> None:
    engine = make_engine(migrated.database_url)
    publisher = Publisher(engine, None, migrated)
    with Session(engine) as db:
        runs = [Run(kind="selftest", spec={}, spec_hash="x") for _ in range(2)]
        db.add_all(runs)
        db.commit()
        run_ids = [r.id for r in runs]
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(24):
                publisher.publish(run_ids[i % 2], "log", {"writer": n, "i": i})
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with Session(engine) as db:
        for run_id in run_ids:
            rows = db.exec(
                select(Event).where(Event.run_id == run_id).order_by(col(Event.id))
            ).all()
            assert [e.seq for e in rows] == list(range(1, 49))
            assert db.get(Run, run_id).event_seq == 48  # type: ignore[union-attr]
    lines = (migrated.runs_dir / run_ids[0] / "events.jsonl").read_text().splitlines()
    assert len(lines) == 48
    engine.dispose()


def test_a_fenced_publisher_stops_storing_once_the_lease_moves_on(migrated: Settings) -> None:
    """A frozen worker's trainer keeps running: its events must not land beside the new
    attempt's. Its publisher is fenced by the lease token it started under."""
    engine = make_engine(migrated.database_url)
    with Session(engine) as db:
        run = Run(kind="selftest", spec={}, spec_hash="x", lease_token=1)
        db.add(run)
        db.commit()
        run_id = run.id
    fenced: list[bool] = []
    old = Publisher(engine, None, migrated, fence=1, on_fenced=lambda: fenced.append(True))
    assert old.publish(run_id, "metric", {"step": 1})["seq"] == 1
    with Session(engine) as db:  # another worker takes the run over: attempt 2
        taken = db.get(Run, run_id)
        assert taken is not None
        taken.lease_token = 2
        db.add(taken)
        db.commit()
    assert old.publish(run_id, "metric", {"step": 2}) == {} and fenced == [True]
    new = Publisher(engine, None, migrated, fence=2)
    assert new.publish(run_id, "metric", {"step": 2})["seq"] == 2
    with Session(engine) as db:
        rows = db.exec(select(Event).where(Event.run_id == run_id).order_by(col(Event.id))).all()
        assert [e.data["step"] for e in rows] == [1, 2] and [e.seq for e in rows] == [1, 2]
    engine.dispose()
