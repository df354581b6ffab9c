"""Group commit of arriving runs (app/intake.py), on a real SQLite file and a real Postgres, with
a real Redis: concurrent submissions share one transaction and one Redis round trip, and each
still gets its own answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from app.intake import Intake
from core.db import make_engine
from core.errors import ApiError
from core.events import Publisher
from core.models import Event, Run
from core.redisconn import sync_redis
from core.runs import prepare_run, record_runs
from core.settings import Settings
from tests.conftest import run_async

DRY = {"kind": "selftest", "dry_run": True}


@pytest.fixture
def publisher(migrated: Settings) -> Iterator[Publisher]:
    engine = make_engine(migrated.database_url)
    yield Publisher(engine, sync_redis(migrated), migrated)
    engine.dispose()


def commits_during(engine: sa.Engine, work: Any) -> tuple[Any, int]:
    count = 0

    def on_commit(_conn: Any) -> None:
        nonlocal count
        count += 1

    sa.event.listen(engine, "commit", on_commit)
    try:
        return work(), count
    finally:
        sa.event.remove(engine, "commit", on_commit)


def submit_together(intake: Intake, submissions: list[tuple[Any, str | None]]) -> list[Any]:
    """All submissions arrive before the drain task runs, so they form one batch."""

    async def go() -> list[Any]:
        intake.start()
        try:
            return await asyncio.gather(
                *(intake.submit(body, key) for body, key in submissions), return_exceptions=True
            )
        finally:
            await intake.stop()

    return run_async(go())


def test_concurrent_submissions_share_one_commit_and_keep_their_own_answers(
    publisher: Publisher, migrated: Settings
) -> None:
    submissions: list[tuple[Any, str | None]] = [(DRY | {"name": f"r{i}"}, None) for i in range(20)]
    submissions += [
        (DRY | {"name": "keyed"}, "k1"),
        (DRY | {"name": "keyed"}, "k1"),  # same key, same body: the same run
        (DRY | {"name": "other"}, "k1"),  # same key, another body: 409
        ({"kind": "selftest", "steps": 0}, None),  # 422 naming the field
        ({"kind": "party"}, None),
    ]
    intake = Intake(publisher, migrated)
    answers, commits = commits_during(
        publisher.engine, lambda: submit_together(intake, submissions)
    )

    assert commits == 1, f"{len(submissions)} submissions took {commits} commits"
    runs = answers[:22]
    assert all(isinstance(a, tuple) for a in runs), runs
    assert [created for _, created in runs] == [True] * 21 + [False]
    assert runs[20][0].id == runs[21][0].id
    conflict, bad_steps, bad_kind = answers[22:]
    assert isinstance(conflict, ApiError) and conflict.status == 409
    assert conflict.details == {"run_id": runs[20][0].id}
    assert isinstance(bad_steps, ApiError) and bad_steps.status == 422
    assert bad_steps.details[0]["field"] == "steps"
    assert isinstance(bad_kind, ApiError) and bad_kind.details[0]["field"] == "kind"

    ids = {run.id for run, _ in runs}
    with Session(publisher.engine) as session:
        stored = session.exec(select(Run)).all()
        events = session.exec(select(Event).where(col(Event.run_id).in_(ids))).all()
    assert {r.id for r in stored} == ids and len(stored) == 21
    assert sorted((e.run_id, e.seq, e.type, e.data["status"]) for e in events) == sorted(
        (i, 1, "status", "queued") for i in ids
    )
    queued = {run.queue for run, _ in runs}
    assert queued == {"cpu"}
    redis = sync_redis(migrated)
    jobs = redis.zrange(migrated.queue_name("cpu"), 0, -1)
    assert sorted(j.decode().split(":")[1] for j in jobs) == sorted(ids)
    for run_id in ids:
        lines = (migrated.run_dir(run_id) / "events.jsonl").read_text().splitlines()
        assert [json.loads(line)["data"]["status"] for line in lines] == ["queued"]


def test_a_clash_in_the_batch_fails_only_its_own_arrival(
    publisher: Publisher, migrated: Settings
) -> None:
    taken = prepare_run(migrated, DRY | {"name": "first"}, None)
    assert record_runs(publisher, [taken]) == [(taken, True)]
    arrivals = [prepare_run(migrated, DRY | {"name": f"n{i}"}, None) for i in range(3)]
    clash = prepare_run(migrated, DRY | {"name": "clash"}, None)
    clash.id = taken.id  # another writer already holds this id
    outcomes = record_runs(publisher, [arrivals[0], clash, *arrivals[1:]])

    assert isinstance(outcomes[1], sa.exc.IntegrityError)
    assert [o for i, o in enumerate(outcomes) if i != 1] == [(a, True) for a in arrivals]
    with Session(publisher.engine) as session:
        names = sorted(r.name or "" for r in session.exec(select(Run)).all())
    assert names == ["first", "n0", "n1", "n2"]


def test_a_stopped_intake_refuses_with_503(publisher: Publisher, migrated: Settings) -> None:
    intake = Intake(publisher, migrated)
    answers = submit_together(intake, [(DRY, None)])
    assert isinstance(answers[0], tuple) and answers[0][1] is True

    async def late() -> None:
        await intake.submit(DRY, None)

    with pytest.raises(ApiError) as refused:
        run_async(late())
    assert refused.value.status == 503
    with Session(publisher.engine) as session:
        assert len(session.exec(select(Run)).all()) == 1


def test_stopping_mid_write_still_answers_the_runs_it_recorded(
    publisher: Publisher, migrated: Settings
) -> None:
    """An API shutting down while a batch is in the threadpool waits for it: those requests get
    their runs, not a 503 that would make their clients submit them twice."""

    async def go() -> list[Any]:
        intake = Intake(publisher, migrated)
        intake.start()
        submitted = [asyncio.create_task(intake.submit(DRY, None)) for _ in range(50)]
        await asyncio.sleep(0.005)  # the batch is being written now
        await intake.stop()
        return await asyncio.gather(*submitted, return_exceptions=True)

    answers = run_async(go())
    assert [a[1] if isinstance(a, tuple) else repr(a) for a in answers] == [True] * 50
    with Session(publisher.engine) as session:
        stored = {r.id for r in session.exec(select(Run)).all()}
    assert stored == {a[0].id for a in answers}
