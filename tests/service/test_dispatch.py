"""Workers start queued runs when the enqueue wakes them, not on a poll (SPEC §11): with the
fallback poll set to a minute, runs still start within a few seconds, one after another in a
one-slot queue, including a run queued before the worker came up."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.conftest import Service
from tests.service.test_lifecycle import loop_spec

FALLBACK_POLL_S = 60  # without wake-ups no run here could start before the test times out


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "TRM_POLL_DELAY_S": str(FALLBACK_POLL_S)}


def started_after_created(run: dict) -> float:  # type: ignore[type-arg]
    created = datetime.fromisoformat(run["created_at"])
    started = datetime.fromisoformat(run["stages"][0]["manifest"]["started_at"])
    return (started - created).total_seconds()


def test_enqueues_wake_the_worker_instead_of_its_poll(service: Service) -> None:
    early = service.submit(loop_spec(1, 0.0, queue="cpu"))  # queued before any worker listens
    service.start_worker()
    service.wait_status(early["id"], "completed", timeout=20)

    for _ in range(3):  # an idle worker, woken by each POST
        run = service.submit(loop_spec(1, 0.0, queue="cpu"))
        done = service.wait_status(run["id"], "completed", timeout=20)
        assert started_after_created(done) < 5, done["stages"][0]["manifest"]

    # The gpu queue has one slot: the second run starts when the first one's job ends.
    first = service.submit(loop_spec(3, 0.3, queue="gpu"))
    second = service.submit(loop_spec(1, 0.0, queue="gpu"))
    first_done = service.wait_status(first["id"], "completed", timeout=20)
    second_done = service.wait_status(second["id"], "completed", timeout=20)
    ended = datetime.fromisoformat(first_done["stages"][-1]["manifest"]["completed_at"])
    began = datetime.fromisoformat(second_done["stages"][0]["manifest"]["started_at"])
    assert 0 <= (began - ended).total_seconds() < 5
