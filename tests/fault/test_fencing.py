"""A stage's child whose run has moved on to a later attempt (its worker froze, another took the
run over) stops at its next step and writes nothing: no stop checkpoint, no outcome, no events.
Before, it stopped "gracefully" and saved into the run directory the new attempt now owns. Real
child process, real database and Redis."""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlmodel import Session, col, select

from core.card import Card
from core.db import make_engine
from core.events import Publisher
from core.models import Event, Run
from core.redisconn import sync_redis
from core.rundir import CHILD_OUTCOME
from core.runs import submit_run
from core.settings import Settings
from tests.conftest import wait_for
from worker.child import EXIT_FENCED, ChildStage
from worker.context import FENCED, StageContext

LOOP = {"kind": "selftest", "steps": 400, "step_seconds": 0.05, "checkpoint_every": 1000}


def test_a_fenced_stage_child_stops_without_writing(migrated: Settings) -> None:
    settings = migrated.model_copy(update={"heartbeat_s": 0.2})
    engine = make_engine(settings.database_url)
    publisher = Publisher(engine, sync_redis(settings), settings)
    run, _ = submit_run(publisher, settings, LOOP, None, queue=False)
    with Session(engine) as session:  # this worker's claim: attempt 1, lease token 1
        session.execute(
            sa.update(Run).where(col(Run.id) == run.id).values(status="running", lease_token=1)
        )
        session.commit()
    ctx = StageContext(
        run_id=run.id,
        kind="selftest",
        stage="loop",
        attempt=1,
        run_dir=settings.run_dir(run.id),
        settings=settings,
        publisher=publisher,
        card=Card(run_id=run.id, kind="selftest"),
        spec=run.spec,
    )
    child = ChildStage(ctx, lease_token=1)
    child.start()

    def steps() -> list[int]:
        with Session(engine) as session:
            events = session.exec(
                select(Event).where(Event.run_id == run.id, Event.type == "metric")
            ).all()
        return [e.data["step"] for e in events]

    wait_for(lambda: len(steps()) >= 3, timeout=30, what="the child's first steps")
    with Session(engine) as session:  # another worker takes the run over: attempt 2
        session.execute(
            sa.update(Run).where(col(Run.id) == run.id).values(lease_token=2, attempt=2)
        )
        session.commit()
    moved_at = time.monotonic()
    seen = len(steps())
    wait_for(lambda: child.poll() is not None, timeout=20, what="the fenced child to stop")

    assert child.poll() == EXIT_FENCED
    assert time.monotonic() - moved_at < 5
    assert child.outcome()["stop_reason"] == FENCED
    stage_dir = ctx.run_dir / "loop"
    assert not (stage_dir / CHILD_OUTCOME).exists(), "the fenced child wrote its outcome"
    assert not (stage_dir / "checkpoint.json").exists(), "the fenced child saved a checkpoint"
    assert len(steps()) == seen, "the fenced child's steps were stored after the move"
    engine.dispose()
