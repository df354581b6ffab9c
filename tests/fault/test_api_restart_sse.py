"""The API killed and restarted while clients stream a run's events: each client reconnects with
`Last-Event-ID` and ends up with every event exactly once, in order."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.helpers import loop_spec, stored_events

CLIENTS = 5


def follow(url: str, run_id: str, seen: list[int], reconnects: list[int]) -> None:
    """An SSE client that reconnects with Last-Event-ID until the terminal status event."""
    last: int | None = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        headers = {"Last-Event-ID": str(last)} if last is not None else {}
        try:
            with httpx.stream(
                "GET", f"{url}/runs/{run_id}/events", headers=headers, timeout=10
            ) as response:
                if response.status_code != 200:
                    raise httpx.TransportError(f"status {response.status_code}")
                event_id, data = None, None
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        event_id = int(line[3:].strip())
                    elif line.startswith("data:"):
                        data = json.loads(line[5:].strip())
                    elif line == "" and event_id is not None:
                        seen.append(event_id)
                        last = event_id
                        if data and data["type"] == "status" and data["data"].get("terminal"):
                            return
                        event_id, data = None, None
        except (httpx.TransportError, httpx.RemoteProtocolError):
            pass
        reconnects.append(1)
        time.sleep(0.2)


def test_sse_clients_see_every_event_once_across_an_api_restart(
    service: Service, settings: Settings
) -> None:
    service.start_worker()
    run = service.submit(loop_spec(80, 0.05))
    seen: list[list[int]] = [[] for _ in range(CLIENTS)]
    reconnects: list[list[int]] = [[] for _ in range(CLIENTS)]
    threads = [
        threading.Thread(target=follow, args=(service.url, run["id"], seen[i], reconnects[i]))
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    wait_for(lambda: all(len(s) >= 10 for s in seen), timeout=40, what="clients to get events")
    api = service.procs[0]
    os.kill(api.pid, signal.SIGKILL)
    api.wait()
    time.sleep(1.0)  # events keep coming while no API is up
    service.start_api()
    for t in threads:
        t.join(timeout=150)
    done = service.wait_status(run["id"], "completed", "failed", timeout=60)
    assert done["status"] == "completed"
    stored = [e["id"] for e in stored_events(settings, run["id"])]
    for i in range(CLIENTS):
        assert reconnects[i], f"client {i} never had to reconnect"
        assert seen[i] == stored, f"client {i}: {len(seen[i])} events, {len(stored)} stored"
