"""Webhooks: a run's terminal status is POSTed to `notify.url`, signed, retried, recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from core.db import get_engine
from core.events import Publisher
from core.models import Event
from core.notify import (
    SIGNATURE_HEADER,
    NotifyConfig,
    deliver,
    on_terminal,
    url_refusal,
    verify,
)
from core.runs import submit_run
from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.deploy.conftest import Receiver

SECRET = "s3cret-for-tests"
LOOPBACK = ("127.0.0.1",)  # the receivers listen here; loopback is called only when listed


def _run(publisher: Publisher, settings: Settings, url: str) -> str:
    spec = {"kind": "selftest", "steps": 1, "notify": {"url": url}}
    allowing = settings.model_copy(update={"notify_allow": ",".join(LOOPBACK)})
    run, _ = submit_run(publisher, allowing, spec, None, queue=False)
    return run.id


def _log_events(publisher: Publisher, run_id: str) -> list[dict[str, Any]]:
    with Session(publisher.engine) as db:
        rows = db.exec(
            select(Event).where(Event.run_id == run_id, Event.type == "log").order_by(col(Event.id))
        ).all()
    return [e.data for e in rows if e.data.get("source") == "notify"]


@pytest.fixture
def publisher(migrated: Settings) -> Publisher:
    allowing = migrated.model_copy(update={"notify_allow": ",".join(LOOPBACK)})
    return Publisher(get_engine(migrated), None, allowing)


def test_only_listed_hosts_are_allowed_loopback_included() -> None:
    for url in ("http://127.0.0.1:9/x", "http://localhost/x", "http://[::1]:8080/x"):
        refused = url_refusal(url, ())
        assert refused is not None and "not allowed" in refused, url
    assert url_refusal("http://127.0.0.1:9/x", ("127.0.0.1",)) is None
    assert url_refusal("http://[::1]:8080/x", ("[::1]:8080",)) is None
    assert url_refusal("http://127.0.0.1:8000/runs", ("127.0.0.1:8644",)) is not None
    refused = url_refusal("https://hooks.example.com/x", ())
    assert refused is not None and "hooks.example.com" in refused
    assert url_refusal("https://hooks.example.com/x", ("hooks.example.com",)) is None
    assert url_refusal("https://a.hooks.example.com/x", ("*.hooks.example.com",)) is None
    assert url_refusal("https://evilhooks.example.com/x", ("*.hooks.example.com",)) is not None
    assert url_refusal("ftp://127.0.0.1/x", ()) is not None
    assert url_refusal("http://user:pw@127.0.0.1/x", ()) is not None


def test_retries_with_backoff_until_accepted_and_records_each_attempt(
    publisher: Publisher, migrated: Settings, receiver: Receiver
) -> None:
    run_id = _run(publisher, migrated, receiver.url)
    receiver.answers = [503, 500]
    delays: list[float] = []
    config = NotifyConfig(secret=SECRET, allow=LOOPBACK, attempts=4, backoff_s=0.5)
    payload = {"run_id": run_id, "status": "completed", "event_id": 7}

    assert deliver(publisher, run_id, receiver.url, payload, config, sleep=delays.append)

    assert [r["answered"] for r in receiver.received] == [503, 500, 200]
    assert delays == [0.5, 1.0]  # doubling backoff
    for request in receiver.received:
        assert verify(SECRET, request["body"], request["headers"].get(SIGNATURE_HEADER))
        assert json.loads(request["body"])["run_id"] == run_id
    attempts = _log_events(publisher, run_id)
    # A failure's status code goes to the process log, never to the run's events.
    assert [(a["attempt"], a["delivered"], a.get("status_code")) for a in attempts] == [
        (1, False, None),
        (2, False, None),
        (3, True, 200),
    ]
    assert attempts[0]["retry_in_s"] == 0.5 and attempts[-1]["retry_in_s"] is None


def test_gives_up_after_the_last_attempt_and_on_a_final_4xx(
    publisher: Publisher, migrated: Settings, receiver: Receiver
) -> None:
    run_id = _run(publisher, migrated, receiver.url)
    config = NotifyConfig(secret=SECRET, allow=LOOPBACK, attempts=3, backoff_s=0.01)
    receiver.answers = [503, 503, 503, 503]
    assert not deliver(publisher, run_id, receiver.url, {"run_id": run_id}, config, lambda _: None)
    assert len(receiver.received) == 3

    receiver.received.clear()
    receiver.answers = [404]
    assert not deliver(publisher, run_id, receiver.url, {"run_id": run_id}, config, lambda _: None)
    assert len(receiver.received) == 1  # a 404 will not change by asking again
    last = _log_events(publisher, run_id)[-1]
    assert last["settled"] and not last["delivered"] and last["status_code"] is None


def test_a_host_off_the_allow_list_is_never_called(
    publisher: Publisher, migrated: Settings
) -> None:
    run_id = _run(publisher, migrated, "http://127.0.0.1:9/unused")
    config = NotifyConfig(secret=SECRET, attempts=2)
    assert not deliver(publisher, run_id, "http://hooks.example.com/x", {}, config)
    [record] = _log_events(publisher, run_id)
    assert record["attempt"] == 0 and "not allowed" in record["error"]


def test_terminal_status_is_posted_in_the_background_with_the_run_fields(
    publisher: Publisher, migrated: Settings, receiver: Receiver
) -> None:
    run_id = _run(publisher, migrated, receiver.url)
    event = {
        "id": 42,
        "run_id": run_id,
        "type": "status",
        "data": {"run_id": run_id, "status": "cancelled", "terminal": True},
    }
    thread = on_terminal(publisher, event)
    assert thread is not None
    thread.join(timeout=30)
    body = json.loads(receiver.received[0]["body"])
    assert body["run_id"] == run_id and body["kind"] == "selftest" and body["event_id"] == 42
    assert body["links"]["card"] == f"/runs/{run_id}/card?format=text"
    # Not terminal, or no notify.url: nothing to deliver.
    assert on_terminal(publisher, {**event, "data": {"terminal": False}}) is None


@pytest.mark.slow
def test_a_finished_run_posts_a_signed_webhook_end_to_end(
    env: dict[str, str], migrated: Settings, tmp_path: Path, receiver: Receiver
) -> None:
    (tmp_path / "logs").mkdir()
    service = Service(
        {
            **env,
            "TRM_NOTIFY_SECRET": SECRET,
            "TRM_NOTIFY_BACKOFF_S": "0.2",
            "TRM_NOTIFY_ALLOW": ",".join(LOOPBACK),
        },
        tmp_path / "logs",
    )
    try:
        service.start_api()
        service.start_worker()
        refused = service.http.post(
            "/runs", json={"kind": "selftest", "steps": 1, "notify": {"url": "http://example.com/"}}
        )
        assert refused.status_code == 422
        assert refused.json()["error"]["details"][0]["field"] == "notify.url"
        receiver.answers = [502]
        run = service.submit({"kind": "selftest", "steps": 3, "notify": {"url": receiver.url}})
        service.wait_status(run["id"], "completed", timeout=60)
        wait_for(receiver.done.is_set, timeout=30, what="the webhook to be delivered")
        publisher = Publisher(get_engine(migrated), None, migrated)
        wait_for(
            lambda: any(a["delivered"] for a in _log_events(publisher, run["id"])),
            timeout=10,
            what="the delivery to be recorded in the run's events",
        )
    finally:
        service.stop()
    last = receiver.received[-1]
    assert verify(SECRET, last["body"], last["headers"].get(SIGNATURE_HEADER))
    body = json.loads(last["body"])
    assert body["status"] == "completed" and body["status_event"]["terminal"] is True
    assert body["status_event"]["next_action"]
    assert [a["status_code"] for a in _log_events(publisher, run["id"])] == [None, 200]
