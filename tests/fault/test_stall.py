"""A stage that stops making progress (no step for `stall_s`) is failed as `stalled`, which is
not a wall-clock timeout: a slow run that keeps stepping for longer than `stall_s` completes."""

from __future__ import annotations

import time

import pytest

from core.settings import Settings
from tests.conftest import Service
from tests.fault.helpers import loop_spec, read_json

# Silence is counted from the stage's start, so the child's start-up (2 s and more on a busy
# 2-core machine) comes out of the slow run's margin: 5 s leaves it 4 s around 1 s steps.
STALL_S = 5.0


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "TRM_STALL_S": str(STALL_S)}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_stage_with_no_step_for_stall_s_fails_as_stalled(
    service: Service, settings: Settings
) -> None:
    service.start_worker()
    slow = service.submit(loop_spec(8, 1.0))  # 8 s in all, longer than stall_s, never stalls
    stuck = service.submit(loop_spec(50, 0.05, stall_at_step=5))
    started = time.monotonic()
    done = service.wait_status(stuck["id"], "failed", "completed", timeout=60)
    took = time.monotonic() - started
    assert done["status"] == "failed" and done["failure_class"] == "stalled", done
    assert "no progress" in done["failure_reason"], done["failure_reason"]
    assert took < STALL_S + 15
    loop = read_json(settings.runs_dir / stuck["id"] / "loop" / "manifest.json")
    assert loop["status"] == "failed" and loop["error"]["class"] == "stalled"
    ok = service.wait_status(slow["id"], "failed", "completed", timeout=60)
    assert ok["status"] == "completed", ok
