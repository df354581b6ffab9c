"""A database outage longer than TRM_DB_RETRY_S, mid-stage: the stage's writes give up, and the
attempt used to end `failed/internal` once the database was back while the runner recorded the
stage. It is no fault of the run: the attempt ends `interrupted` and the next one completes it."""

from __future__ import annotations

import time

import pytest

from tests.conftest import Service, wait_for
from tests.fault.conftest import TcpProxy
from tests.fault.helpers import loop_spec
from tests.fault.test_postgres_outage import step_of

RETRY_S = 6.0


@pytest.fixture
def env(env: dict[str, str], pg_proxy: TcpProxy) -> dict[str, str]:
    url = env["TRM_DATABASE_URL"].replace(":5432/", f":{pg_proxy.port}/")
    return {**env, "TRM_DATABASE_URL": url, "TRM_DB_RETRY_S": str(RETRY_S)}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_an_outage_longer_than_the_retry_window_interrupts_the_run_never_fails_it(
    service: Service, pg_proxy: TcpProxy
) -> None:
    service.start_worker("worker-a")
    run = service.submit(loop_spec(80, 0.1, checkpoint_every=1, queue="gpu"))
    wait_for(lambda: step_of(service, run["id"]) >= 5, timeout=40, what="five steps")
    pg_proxy.cut()
    # Back after the stage's writes gave up (RETRY_S) and while the runner still retries its own
    # record of the stage (up to 2 x RETRY_S): when the old runner recorded failed/internal.
    time.sleep(RETRY_S * 1.5)
    pg_proxy.restore()
    done = service.wait_status(run["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done
    first = done["attempts"][0]
    assert first["outcome"] == "interrupted", done["attempts"]
    assert done["attempt"] >= 2 and done["failure_class"] is None
