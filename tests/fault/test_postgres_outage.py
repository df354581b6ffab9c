"""Postgres unreachable for 10 s (a TCP proxy between the service and the server is cut): the API
answers 503 with a clear message on /readyz and on reads and writes, and recovers by itself; the
worker retries its writes and the run completes; no manifest is ever half-written."""

from __future__ import annotations

import time

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.conftest import TcpProxy
from tests.fault.helpers import loop_spec, no_temp_files, read_json

OUTAGE_S = 10.0


@pytest.fixture
def env(env: dict[str, str], pg_proxy: TcpProxy) -> dict[str, str]:
    url = env["TRM_DATABASE_URL"].replace(":5432/", f":{pg_proxy.port}/")
    return {**env, "TRM_DATABASE_URL": url}


def step_of(service: Service, run_id: str) -> int:
    return int((service.run(run_id)["card"] or {}).get("step") or 0)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_postgres_outage_gives_503_then_recovers_and_the_run_completes(
    service: Service, settings: Settings, pg_proxy: TcpProxy
) -> None:
    service.start_worker("worker-a")
    run = service.submit(loop_spec(60, 0.1, checkpoint_every=1, queue="gpu"))
    wait_for(lambda: step_of(service, run["id"]) >= 5, timeout=40, what="five steps")
    pg_proxy.cut()
    cut_at = time.monotonic()
    answers: dict[str, list[tuple[int, dict]]] = {"readyz": [], "post": [], "get": []}  # type: ignore[type-arg]
    while time.monotonic() - cut_at < OUTAGE_S:
        ready = service.http.get("/readyz")
        answers["readyz"].append((ready.status_code, ready.json()))
        post = service.http.post("/runs", json=loop_spec(2, 0.01))
        answers["post"].append((post.status_code, post.json()))
        got = service.http.get(f"/runs/{run['id']}")
        answers["get"].append((got.status_code, got.json()))
        time.sleep(1.0)
    pg_proxy.restore()
    for what, seen in answers.items():
        codes = {code for code, _ in seen}
        assert codes == {503}, f"{what} during the outage answered {codes}: {seen[-1][1]}"
    assert answers["readyz"][-1][1]["checks"]["database"]["ok"] is False
    error = answers["post"][-1][1]["error"]
    assert error["code"] == "unavailable" and "database" in error["message"], error
    wait_for(
        lambda: service.http.get("/readyz").status_code == 200,
        timeout=20,
        what="/readyz to recover by itself",
    )
    assert service.http.post("/runs", json=loop_spec(2, 0.01)).status_code == 202
    done = service.wait_status(run["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done
    assert done["attempt"] == 1, "the worker retried its writes instead of giving up the attempt"
    run_dir = settings.runs_dir / run["id"]
    assert not no_temp_files(run_dir)
    for manifest in run_dir.glob("*/manifest.json"):
        assert read_json(manifest)["status"] == "completed", manifest
    assert read_json(run_dir / "loop" / "manifest.json")["counters"]["steps_run"] == 60
