"""The job timeout (TRM_JOB_TIMEOUT_S) stops the run, not only arq's coroutine: the stage's child
process is stopped (SIGTERM, then SIGKILL after TRM_CANCEL_GRACE_S), the run fails `timeout`,
and the gpu slot holds one run at a time throughout. Before, arq's timeout freed the slot while
the child went on training, and the worker started a second gpu run beside it."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from core.db import make_engine
from core.events import Publisher
from core.redisconn import sync_redis
from core.rundir import CHILD_PAYLOAD
from core.settings import Settings
from tests.conftest import Service, run_async
from tests.fault.helpers import loop_spec
from worker.main import run_job
from worker.runner import Runner

# Above a short run's whole attempt on a loaded machine (its stage process alone took over 4 s
# to start there), below the long run's steps.
JOB_TIMEOUT_S = 15


def children_of(payload: Path) -> list[psutil.Process]:
    """The stage processes started for `payload` (a stage folder's child payload)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if str(payload) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def wait_for_child(payload: Path, timeout: float) -> list[psutil.Process]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := children_of(payload):
            return found
        time.sleep(0.1)
    raise AssertionError(f"no stage process for {payload} within {timeout}s")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_job_timeout_stops_the_stage_process_and_keeps_one_run_per_slot(
    service: Service, settings: Settings
) -> None:
    service.start_worker(queues="gpu", extra_env={"TRM_JOB_TIMEOUT_S": str(JOB_TIMEOUT_S)})
    long = service.submit(loop_spec(1200, 0.05, queue="gpu"))  # 60 s of steps, past the timeout
    short = service.submit(loop_spec(2, 0.05, queue="gpu"))
    payload = settings.runs_dir / long["id"] / "loop" / CHILD_PAYLOAD
    child = wait_for_child(payload, timeout=30)

    done = service.wait_status(long["id"], "failed", "completed", timeout=60)
    assert (done["status"], done["failure_class"]) == ("failed", "timeout"), done
    assert "TRM_JOB_TIMEOUT_S" in done["failure_reason"], done["failure_reason"]
    assert not children_of(payload), "the stage process outlived its run"
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in child)
    loop = next(s for s in done["stages"] if s["name"] == "loop")
    assert loop["status"] == "failed" and loop["manifest"]["error"]["class"] == "timeout"

    after = service.wait_status(short["id"], "completed", "failed", timeout=60)
    assert after["status"] == "completed", after.get("failure_reason")
    ended = datetime.fromisoformat(done["attempts"][-1]["ended_at"])
    started = datetime.fromisoformat(after["attempts"][0]["started_at"])
    assert started >= ended, f"the second gpu run started at {started}, before {ended}"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_arqs_own_timeout_holds_the_slot_until_the_attempt_has_ended(
    service: Service, settings: Settings
) -> None:
    """arq times a job out with `asyncio.wait_for`, which cancels the coroutine; the attempt runs
    in a thread that a cancel does not reach. The job now stops the attempt and returns only once
    it has ended, so arq frees the slot when nothing of the run is left running."""
    run = service.submit(loop_spec(200, 0.05, queue="gpu"))  # 10 s of steps; no worker takes it
    engine = make_engine(settings.database_url)
    runner = Runner(settings, Publisher(engine, sync_redis(settings), settings), "in-test")
    payload = settings.runs_dir / run["id"] / "loop" / CHILD_PAYLOAD

    async def arq_times_it_out() -> None:
        job = asyncio.ensure_future(run_job({"runner": runner}, run["id"], 1))
        for _ in range(200):  # until the stage process is up: the job is well under way
            if children_of(payload):
                break
            await asyncio.sleep(0.1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(job, timeout=0.5)

    try:
        run_async(arq_times_it_out())
    finally:
        engine.dispose()
    assert not children_of(payload), "the stage process outlived its job"
    done = service.run(run["id"])
    assert (done["status"], done["failure_class"]) == ("failed", "timeout"), done
