"""A run claimed the way a worker claims it (the real runner's claim, the real stage recorder), for
tests of the upload channel that need the lease holder's credential without a worker process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.db import get_engine
from core.events import Publisher
from core.models import Run
from core.rundir import LEASE_TOKEN_HEADER, UPLOAD_KEY_HEADER
from core.runs import submit_run
from core.runstate import set_status
from core.settings import Settings
from worker.artifact_sync import UploadPass
from worker.kinds import KINDS
from worker.manifests import StageRecorder
from worker.runner import Runner


def publisher_of(settings: Settings) -> Publisher:
    return Publisher(get_engine(settings), None, settings)


def queued_run(settings: Settings, spec: dict[str, Any] | None = None) -> str:
    """A run recorded but not handed to any worker (it stays queued)."""
    body = spec or {"kind": "selftest", "steps": 1}
    run, _ = submit_run(publisher_of(settings), settings, body, None, queue=False)
    return run.id


def claim(
    settings: Settings,
    run_id: str,
    stage: str | None = None,
    worker: str = "test-host:1",
    run_dir: Path | None = None,
    attempt: int = 1,
) -> UploadPass:
    """Claim queued run `run_id` (attempt `attempt`) as worker `worker` and start its stage
    `stage` (its manifest goes to `run_dir`, the worker's copy of the run directory); the
    attempt's upload credential."""
    run = Runner(settings, publisher_of(settings), worker)._claim(run_id, attempt)
    assert run is not None and run.upload_key, f"run {run_id} was not claimed"
    if stage is not None:
        start_stage(settings, run_id, stage, attempt, run_dir)
    return UploadPass(run.lease_token, run.upload_key)


def start_stage(
    settings: Settings, run_id: str, stage: str, attempt: int = 1, run_dir: Path | None = None
) -> None:
    """The attempt moves on to `stage`, as the runner's stage recorder records it."""
    publisher = publisher_of(settings)
    with publisher.transaction() as tx:
        run = tx.session.get(Run, run_id)
        assert run is not None
        kind = run.kind
    position = [s.name for s in KINDS[kind].stages].index(stage)
    recorder = StageRecorder(publisher, run_id, run_dir or settings.run_dir(run_id), attempt)
    recorder.start(stage, position)


def requeue(settings: Settings, run_id: str) -> None:
    """What the reconciler does to a run whose worker vanished: interrupted, then the next
    attempt queued."""
    with publisher_of(settings).transaction() as tx:
        run = tx.session.get(Run, run_id)
        assert run is not None
        assert set_status(tx, run, "interrupted", expect_lease=run.lease_token)
        assert set_status(tx, run, "queued", attempt=run.attempt + 1, worker_id=None)


def headers(credential: UploadPass | None, sha256: str) -> dict[str, str]:
    sent = {"X-Content-SHA256": sha256}
    if credential is not None:
        sent[UPLOAD_KEY_HEADER] = credential.key
        sent[LEASE_TOKEN_HEADER] = str(credential.lease_token)
    return sent


def stored_key(settings: Settings, run_id: str) -> str | None:
    from sqlmodel import Session

    with Session(get_engine(settings)) as db:
        run = db.get(Run, run_id)
        return run.upload_key if run else None
