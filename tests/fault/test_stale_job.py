"""A worker that dies between arq marking a job started (`arq:in-progress:<job>`, kept for the job
timeout + 10 s: a week) and claiming the run in the database left the run `queued` for that week:
every worker passed over the marked job and the reconciler's re-enqueue was refused. And a run
whose worker was killed mid-run left its first attempt's job on the queue for that week, counted
by the queue-depth metric."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
import redis

from core.queue import QUEUES, in_progress_ms, job_id
from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.helpers import loop_spec


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    # A live worker claims within TRM_DB_RETRY_S + TRM_STALE_AFTER_S (2 + 3 s here); an older
    # mark on a still-queued run is a dead worker's.
    return {**env, "TRM_DB_RETRY_S": "2"}


def queue_depths(service: Service) -> dict[str, int]:
    text = service.http.get("/metrics").text
    return {q: int(n) for q, n in re.findall(r'trm_queue_depth\{queue="(\w+)"\} (\d+)', text)}


def test_run_marked_by_a_dead_worker_completes_within_the_reconcile_period(
    service: Service, settings: Settings
) -> None:
    run = service.submit(loop_spec(3, 0.01, queue="gpu"))  # no worker yet: it waits on the queue
    jid = job_id(settings, run["id"], 1)
    client = redis.Redis.from_url(settings.redis_url or "")
    try:
        # What a worker killed right after arq's start of the job leaves behind: the week-long
        # in-progress mark and one try counted, and no claim in the database.
        client.psetex(f"arq:in-progress:{jid}", in_progress_ms(settings), b"1")
        client.incr(f"arq:retry:{jid}")
        started = time.monotonic()
        service.start_worker("worker-b")
        done = service.wait_status(run["id"], "completed", "failed", timeout=60)
        took = time.monotonic() - started
        assert done["status"] == "completed", done
        assert done["attempt"] == 1 and done["attempts"][0]["worker_id"] == "worker-b"
        assert took < 60, f"the run waited {took:.0f}s"
        wait_for(
            lambda: queue_depths(service) == dict.fromkeys(QUEUES, 0),
            timeout=20,
            what="the queues to empty once the run finished",
            detail=lambda: str(queue_depths(service)),
        )
        assert not client.exists(f"arq:in-progress:{jid}", f"arq:job:{jid}")
    finally:
        client.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_jobs_of_killed_attempts_leave_the_queue(service: Service, settings: Settings) -> None:
    first = service.start_worker("worker-a")
    run = service.submit(loop_spec(40, 0.05, checkpoint_every=5, queue="gpu"))
    service.wait_status(run["id"], "running", timeout=40)
    service.start_worker("worker-b")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    done = service.wait_status(run["id"], "completed", "failed", timeout=90)
    assert done["status"] == "completed" and done["attempt"] == 2, done
    # Attempt 1's job, marked started by the killed worker, must not be counted for a week.
    wait_for(
        lambda: queue_depths(service) == dict.fromkeys(QUEUES, 0),
        timeout=20,
        what="the queue depth to return to 0",
        detail=lambda: str(queue_depths(service)),
    )
    client = redis.Redis.from_url(settings.redis_url or "")
    try:
        jid = job_id(settings, run["id"], 1)
        assert not client.exists(f"arq:in-progress:{jid}", f"arq:job:{jid}")
    finally:
        client.close()
