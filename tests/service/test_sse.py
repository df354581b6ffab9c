"""SSE over a real uvicorn: replay, live follow, reconnect with Last-Event-ID, keep-alive, end.

The tests whose runs never meet a worker share an API per database (`shared_service`); those
that follow a run a worker runs start a `service` of their own."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from sqlmodel import Session, col, select

from app.client import iter_sse
from core.db import make_engine
from core.models import Event
from core.settings import Settings
from tests.conftest import Service, wait_for


def stored_ids(settings: Settings, run_id: str) -> list[int]:
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        ids = db.exec(select(Event.id).where(Event.run_id == run_id).order_by(col(Event.id))).all()
    engine.dispose()
    return [int(i) for i in ids if i is not None]


def read_stream(
    service: Service, run_id: str, last_id: int | None, stop_after: int | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Events (and raw comment lines) until the server ends the stream or `stop_after` events."""
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    events: list[dict[str, Any]] = []
    comments: list[str] = []

    def lines(response: httpx.Response):  # type: ignore[no-untyped-def]
        for line in response.iter_lines():
            if line.startswith(":"):
                comments.append(line)
            yield line

    with service.http.stream(
        "GET", f"/runs/{run_id}/events", headers=headers, timeout=httpx.Timeout(30, read=30)
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in iter_sse(lines(response)):
            events.append(event)
            if stop_after is not None and len(events) >= stop_after:
                break
    return events, comments


def test_reconnect_with_last_event_id_sees_every_event_once(
    service: Service, settings: Settings
) -> None:
    service.start_worker()
    run = service.submit({"kind": "selftest", "steps": 40, "step_seconds": 0.05})
    first, _ = read_stream(service, run["id"], None, stop_after=8)
    time.sleep(0.5)  # events keep coming while this client is away
    rest, _ = read_stream(service, run["id"], first[-1]["id"])
    got = [e["id"] for e in first + rest]
    assert got == stored_ids(settings, run["id"])  # each stored event, once, in order
    assert len(got) == len(set(got))
    assert rest[-1]["type"] == "status" and rest[-1]["data"]["status"] == "completed"


def test_many_followers_agree_with_the_database(service: Service, settings: Settings) -> None:
    run = service.submit({"kind": "selftest", "steps": 30, "step_seconds": 0.03})
    results: list[list[int]] = []

    def follow() -> None:
        events, _ = read_stream(service, run["id"], None)
        results.append([e["id"] for e in events])

    threads = [threading.Thread(target=follow) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    service.start_worker()  # the run starts while every follower is attached
    for thread in threads:
        thread.join(timeout=60)
    expected = stored_ids(settings, run["id"])
    assert len(results) == 8
    assert all(ids == expected for ids in results)


def test_stream_of_an_ended_run_replays_then_ends(shared_service: Service) -> None:
    service = shared_service  # no worker: the run is cancelled while queued
    run = service.submit({"kind": "selftest", "steps": 2})
    service.http.post(f"/runs/{run['id']}/cancel")
    events, _ = read_stream(service, run["id"], None)
    assert [e["data"]["status"] for e in events if e["type"] == "status"] == ["queued", "cancelled"]
    after_end, _ = read_stream(service, run["id"], events[-1]["id"])
    assert after_end == []


def test_quiet_stream_sends_keep_alive_comments(shared_service: Service) -> None:
    service = shared_service
    run = service.submit({"kind": "selftest", "steps": 2})  # no worker: nothing happens
    comments: list[str] = []

    def listen() -> None:
        _events, got = read_stream_until(service, run["id"], 3.5)
        comments.extend(got)

    thread = threading.Thread(target=listen)
    thread.start()
    thread.join(timeout=10)
    assert any(c.startswith(": ping") for c in comments), comments


def read_stream_until(service: Service, run_id: str, seconds: float) -> tuple[list[Any], list[str]]:
    comments: list[str] = []
    deadline = time.monotonic() + seconds
    with service.http.stream(
        "GET", f"/runs/{run_id}/events", timeout=httpx.Timeout(10, read=seconds + 2)
    ) as response:
        for line in response.iter_lines():
            if line.startswith(":"):
                comments.append(line)
            if time.monotonic() > deadline:
                break
    return [], comments


def test_after_query_parameter_replays_from_that_id(shared_service: Service) -> None:
    service, settings = shared_service, shared_service.settings  # no worker
    run = service.submit({"kind": "selftest", "steps": 2})
    service.http.post(f"/runs/{run['id']}/cancel")
    wait_for(lambda: len(stored_ids(settings, run["id"])) >= 2, timeout=5, what="two events")
    ids = stored_ids(settings, run["id"])
    with service.http.stream(
        "GET", f"/runs/{run['id']}/events", params={"after": ids[0]}
    ) as response:
        events = list(iter_sse(response.iter_lines()))
    assert [e["id"] for e in events] == ids[1:]
