"""SSE streams are bounded: a long run's replay is read from the
database a page at a time, and a hostile `Last-Event-ID` is a 422 naming the header."""

from __future__ import annotations

import psutil

from app.client import iter_sse
from bench.sse_replay import PeakRss, store_events
from tests.conftest import Service
from tests.service.test_sse import read_stream, stored_ids

EVENTS = 50_000
MIB = 1024 * 1024


def test_replay_of_50k_events_streams_in_pages_not_all_at_once(shared_service: Service) -> None:
    service, settings = shared_service, shared_service.settings  # no worker: runs stay as sent
    run = service.submit({"kind": "selftest"})  # no worker: the events below are its history
    store_events(settings.database_url, run["id"], EVENTS, size=600)
    assert service.api is not None
    api = psutil.Process(service.api.pid)
    pids = [api.pid, *(c.pid for c in api.children(recursive=True))]
    ids: list[int] = []
    with PeakRss(pids) as rss, service.http.stream("GET", f"/runs/{run['id']}/events") as response:
        assert response.status_code == 200
        for event in iter_sse(response.iter_lines()):
            ids.append(event["id"])
    # The whole replay held ~75 MiB of event dicts in the API before its first byte (bench/
    # sse_replay.py: 448 MiB for 300k); a page of 1000 is a few MiB.
    assert rss.growth < 32 * MIB, f"the API grew {rss.growth / MIB:.0f} MiB during the replay"
    assert ids == stored_ids(settings, run["id"])  # every event once, in order, then the end
    assert len(ids) == EVENTS + 2


def test_tail_replays_only_the_last_events_then_reconnects_exactly(shared_service: Service) -> None:
    service, settings = shared_service, shared_service.settings
    run = service.submit({"kind": "selftest"})
    store_events(settings.database_url, run["id"], 500, size=20)
    every = stored_ids(settings, run["id"])
    response = service.http.get(f"/runs/{run['id']}/events", params={"tail": 200})
    got = [e["id"] for e in iter_sse(response.iter_lines())]
    assert got == every[-200:]  # the dashboard's first connection: recent events only
    # A reconnect's Last-Event-ID wins over ?tail= (the browser keeps the URL).
    response = service.http.get(
        f"/runs/{run['id']}/events", params={"tail": 200}, headers={"Last-Event-ID": str(every[9])}
    )
    assert [e["id"] for e in iter_sse(response.iter_lines())] == every[10:]


HOSTILE_IDS = ["²", "١٢", "-1", "+5", "1e3", "0x10", "abc", str(2**63), "9" * 40, "1 2"]


def test_hostile_event_ids_are_422s_naming_the_field(shared_service: Service) -> None:
    """`²` passed str.isdigit() and int() then failed: a 500; 2**63 overflowed the query."""
    service = shared_service
    run = service.submit({"kind": "selftest"})
    url = f"/runs/{run['id']}/events"
    for value in HOSTILE_IDS:
        try:
            raw = value.encode("latin-1")  # how a server decodes header bytes: `²` arrives as `²`
        except UnicodeEncodeError:
            raw = value.encode()
        response = service.http.get(url, headers={"Last-Event-ID": raw})
        assert response.status_code == 422, (value, response.text)
        assert "Last-Event-ID" in response.json()["error"]["message"]
    for query in ["after=²", f"after={2**63}", "after=-1", "tail=-1", "tail=x"]:
        response = service.http.get(f"{url}?{query}")
        assert response.status_code == 422, (query, response.text)
        assert query.split("=")[0] in response.text


def test_largest_event_id_replays_nothing_and_follows(shared_service: Service) -> None:
    service, settings = shared_service, shared_service.settings
    run = service.submit({"kind": "selftest"})
    store_events(settings.database_url, run["id"], 3, size=10)
    events, _ = read_stream(service, run["id"], 2**63 - 1)
    assert events == []  # past every stored event of an ended run: nothing to send, the end
