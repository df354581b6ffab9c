"""The publisher: per run, `seq` is contiguous and ids grow in commit order, even with many
writers at once (on SQLite and Postgres)."""

from __future__ import annotations

import threading

from sqlmodel import Session, col, select

from app.db import make_engine
from app.events import Publisher
from app.models import Event, Run
from app.settings import Settings


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
