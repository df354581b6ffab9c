"""Redis restarted empty while runs are queued and running: the database is the record, so the
queued runs are enqueued again, the running one keeps going, and no run is lost."""

from __future__ import annotations

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.conftest import RedisServer
from tests.fault.helpers import loop_spec


@pytest.fixture
def env(env: dict[str, str], private_redis: RedisServer) -> dict[str, str]:
    return {**env, "TRM_REDIS_URL": private_redis.url}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_redis_restarted_empty_loses_no_run(
    service: Service, settings: Settings, private_redis: RedisServer
) -> None:
    service.start_worker("worker-a")
    running = service.submit(loop_spec(40, 0.05, queue="gpu"))
    queued = [service.submit(loop_spec(3, 0.01, queue="gpu")) for _ in range(3)]
    service.wait_status(running["id"], "running", timeout=30)
    assert all(service.run(r["id"])["status"] == "queued" for r in queued)
    private_redis.kill()
    private_redis.start()  # same port, nothing in it: the queue is gone
    later = service.submit(loop_spec(3, 0.01, queue="cpu"))  # the API reconnects by itself
    for run in [running, *queued, later]:
        done = service.wait_status(run["id"], "completed", "failed", timeout=90)
        assert done["status"] == "completed", done
    assert service.run(running["id"])["attempt"] == 1  # kept going, not restarted
    ready = service.http.get("/readyz")
    wait_for(
        lambda: service.http.get("/readyz").json()["checks"]["redis"]["live_fanout"] is True,
        timeout=10,
        what="the live fan-out to reconnect",
    )
    assert ready.status_code == 200, ready.text
