"""Write access to Redis is not code execution on a worker: arq's jobs travel as JSON, so a
pickle planted on a queue is refused as data and never unpickled. Real Redis, a real worker."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import pytest
import redis
from arq.constants import job_key_prefix

from core.queue import job_serializer
from core.redisconn import redis_url
from core.settings import Settings
from tests.conftest import Service
from tests.stack import wait_for

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


class Planted:
    """Unpickling this touches a file: what a pickle payload could do with any command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, int]]:
        return (os.open, (str(self.marker), os.O_CREAT | os.O_WRONLY))


def test_a_pickle_planted_on_the_queue_never_runs_and_the_worker_serves_on(
    service: Service, settings: Settings, tmp_path: Path
) -> None:
    marker = tmp_path / "pickle-ran"
    client = redis.Redis.from_url(redis_url(settings))
    job_id = f"{settings.redis_namespace}:planted"
    job = {"t": 1, "f": "run_job", "a": [Planted(marker)], "k": {}, "et": int(time.time() * 1000)}
    client.psetex(job_key_prefix + job_id, 60_000, pickle.dumps(job))
    client.zadd(settings.queue_name("gpu"), {job_id: time.time() * 1000})
    service.start_worker()
    planted = job_key_prefix + job_id
    wait_for(lambda: not client.exists(planted), 60, "the worker to drop the planted job")
    assert not marker.exists(), "the worker unpickled a job from Redis"
    # The worker is still there and serves a real run (its job written as JSON).
    run = service.submit({"kind": "selftest", "steps": 2, "step_seconds": 0})
    assert service.wait_status(run["id"], "completed", "failed")["status"] == "completed"
    assert job_serializer({"a": ["r1", 1]}) == b'{"a":["r1",1]}'
