"""The worker registry: `GET /workers`, `/readyz`'s count, and the card naming the worker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session

from core.db import get_engine
from core.models import WorkerRecord, utcnow
from core.settings import Settings
from tests.conftest import Service, wait_for


@pytest.fixture
def registry(service: Service) -> Service:
    return service


def _workers(service: Service) -> dict[str, dict]:
    response = service.http.get("/workers")
    assert response.status_code == 200, response.text
    return {w["id"]: w for w in response.json()["workers"]}


def test_a_running_worker_is_listed_alive_and_a_silent_one_is_not(
    registry: Service, migrated: Settings
) -> None:
    registry.start_worker("box-a:gpu0")
    wait_for(
        lambda: _workers(registry).get("box-a:gpu0", {}).get("alive", False),
        timeout=30,
        what="the worker to register",
    )
    with Session(get_engine(migrated)) as db:
        db.add(
            WorkerRecord(
                id="gone:1",
                host="gone",
                pid=1,
                queues=["gpu"],
                current_run_id="01ARZ3NDEKTSV4RRFFQ69G5FAV",
                heartbeat_at=utcnow() - timedelta(seconds=5),  # stale, not yet pruned
            )
        )
        db.commit()
    workers = _workers(registry)
    live = workers["box-a:gpu0"]
    assert live["queues"] == ["gpu", "cpu"] and live["host"] and live["pid"] > 0
    assert live["gpu_name"] is None and live["gpu_memory_bytes"] is None  # a CPU machine
    gone = workers["gone:1"]
    assert gone["alive"] is False and gone["current_run_id"] is None
    body = registry.http.get("/workers").json()
    assert body["alive"] == 1
    assert registry.http.get("/readyz").json()["checks"]["workers"]["alive"] == 1


def test_the_card_and_the_registry_name_the_worker_running_a_run(registry: Service) -> None:
    registry.start_worker("box-b:gpu1")
    run = registry.submit({"kind": "selftest", "steps": 40, "step_seconds": 0.1})
    wait_for(
        lambda: _workers(registry).get("box-b:gpu1", {}).get("current_run_id") == run["id"],
        timeout=30,
        what="the registry to show the worker's current run",
    )
    card = registry.http.get(f"/runs/{run['id']}/card").json()
    assert card["worker"] == "box-b:gpu1"
    registry.wait_status(run["id"], "completed", timeout=60)
    assert _workers(registry)["box-b:gpu1"]["current_run_id"] is None
