"""RUNS_DIR on a 4 MiB tmpfs that fills up in the middle of a run: the run fails with a clear
`internal` reason naming the full disk, and nothing else breaks (the API answers, the worker
lives on, and once there is room again the next run completes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.conftest import Tmpfs
from tests.fault.helpers import loop_spec


@pytest.fixture
def runs_disk(tmp_path: Path) -> Iterator[Tmpfs]:
    disk = Tmpfs(tmp_path / "runs", "4m")
    yield disk
    disk.unmount()


@pytest.fixture
def env(env: dict[str, str], runs_disk: Tmpfs) -> dict[str, str]:
    # A floor this small disk can be above: /readyz goes not-ready only while it is full.
    return {**env, "TRM_RUNS_DIR": str(runs_disk.path), "TRM_MIN_FREE_BYTES": str(1024 * 1024)}


def step_of(service: Service, run_id: str) -> int:
    return int((service.run(run_id)["card"] or {}).get("step") or 0)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_full_runs_disk_fails_the_run_as_internal_and_breaks_nothing_else(
    service: Service, settings: Settings, runs_disk: Tmpfs
) -> None:
    worker = service.start_worker()
    run = service.submit(loop_spec(200, 0.05, checkpoint_every=1))
    wait_for(lambda: step_of(service, run["id"]) >= 3, timeout=40, what="three steps")
    filler = runs_disk.fill()
    done = service.wait_status(run["id"], "failed", "completed", timeout=60)
    assert done["status"] == "failed", done
    assert done["failure_class"] == "internal", done
    assert "No space left on device" in done["failure_reason"], done["failure_reason"]
    full = service.http.get("/readyz")  # it answers, and says why it is not ready
    assert full.status_code == 503 and full.json()["checks"]["disk"]["runs_dir"]["ok"] is False
    assert worker.poll() is None, "the worker survived"
    filler.unlink()
    assert service.http.get("/readyz").status_code == 200
    again = service.submit(loop_spec(3, 0.01))
    assert service.wait_status(again["id"], "completed", "failed", timeout=60)["status"] == (
        "completed"
    )
