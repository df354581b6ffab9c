"""A worker killed (`kill -9`) or frozen in the middle of a run: the run goes `interrupted`, another
worker resumes it from the newest checkpoint as attempt 2, and two trainers never run the same run
at once (the lease's fencing token lives in the database)."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.helpers import (
    lease_token,
    loop_spec,
    read_json,
    steps_after_attempt,
    stored_events,
)


def step_of(service: Service, run_id: str) -> int:
    return int((service.run(run_id)["card"] or {}).get("step") or 0)


def children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_kill9_mid_run_resumes_on_another_worker_without_overlap(
    service: Service, settings: Settings
) -> None:
    first = service.start_worker("worker-a")
    run = service.submit(loop_spec(50, 0.05, checkpoint_every=5, queue="gpu"))
    wait_for(lambda: step_of(service, run["id"]) >= 12, timeout=40, what="a dozen steps")
    trainers = children_of(first.pid)
    assert trainers, "the stage runs in a child process of the worker"
    service.start_worker("worker-b")  # already polling when the first one dies
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    # The trainer dies with its worker (PR_SET_PDEATHSIG): nobody trains while the run waits.
    gone, alive = psutil.wait_procs(trainers, timeout=5)
    assert not alive, f"trainer outlived its worker: {alive}"
    done = service.wait_status(run["id"], "completed", "failed", timeout=90)
    assert done["status"] == "completed", done
    assert done["attempt"] == 2
    attempts = done["attempts"]
    assert [(a["attempt"], a["worker_id"], a["outcome"]) for a in attempts] == [
        (1, "worker-a", "interrupted"),
        (2, "worker-b", "completed"),
    ]
    assert attempts[0]["ended_at"] <= attempts[1]["started_at"]  # the attempts never overlap
    assert lease_token(settings, run["id"]) == 2  # one fencing token per claim
    loop = read_json(settings.runs_dir / run["id"] / "loop" / "manifest.json")
    resumed = loop["counters"]["resumed_from_step"]
    assert resumed >= 10 and resumed % 5 == 0  # the newest checkpoint, not step 0
    assert loop["counters"]["steps_run"] == 50 - resumed
    steps = steps_after_attempt(stored_events(settings, run["id"]), 2)
    assert steps == list(range(resumed + 1, 51)), "one trainer, counting on from the checkpoint"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_frozen_worker_loses_its_lease_and_its_trainer_stops(
    service: Service, settings: Settings
) -> None:
    """SIGSTOP the worker (a long GC pause, a paused VM): its heartbeat stops, the run moves to
    another worker. The frozen worker's trainer must not keep training the same run."""
    first = service.start_worker("worker-a")
    run = service.submit(loop_spec(120, 0.05, checkpoint_every=1, queue="gpu"))
    wait_for(lambda: step_of(service, run["id"]) >= 5, timeout=40, what="five steps")
    service.start_worker("worker-b")
    first.send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: (
                service.run(run["id"])["attempt"] == 2
                and service.run(run["id"])["status"] == "running"
            ),
            timeout=30,
            what="attempt 2 to start on worker-b",
        )
        time.sleep(2.0)  # both trainers would be stepping now, if the first one still ran
    finally:
        first.send_signal(signal.SIGCONT)
    done = service.wait_status(run["id"], "completed", "failed", timeout=90)
    assert done["status"] == "completed", done
    assert [a["worker_id"] for a in done["attempts"]] == ["worker-a", "worker-b"]
    steps = steps_after_attempt(stored_events(settings, run["id"]), 2)
    assert steps == sorted(steps) and len(steps) == len(set(steps)), (
        "two trainers published steps for the same run at once: " + str(steps[:40])
    )
