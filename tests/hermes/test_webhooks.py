"""Run webhooks as a Hermes webhook route (or any GitHub-style receiver) takes them: signed as
`X-Hub-Signature-256`, one delivery id across retries, and the attempts visible to a follower of
the run's event stream."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import ROOT, Service
from tests.hermes.test_skill import HERMES_PYTHON
from tests.stack import create_database, drop_database, free_port, wait_for

SECRET = "hermes-route-secret"


class GitHubStyleReceiver:
    """Verifies X-Hub-Signature-256 as GitHub documents it (HMAC-SHA256 of the raw body, hex,
    `sha256=` prefix, constant-time compare), answers 500 to the first good delivery, and
    accepts each X-Request-ID once."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []  # every request: headers, body, answer
        self.accepted: list[str] = []
        self.failed_once = False
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                given = self.headers.get("X-Hub-Signature-256", "")
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                delivery = self.headers.get("X-Request-ID", "")
                with lock:
                    if not hmac.compare_digest(given.encode(), expected.encode()):
                        code = 401
                    elif not outer.failed_once:
                        outer.failed_once, code = True, 500
                    elif delivery in outer.accepted:
                        code = 200  # a duplicate: acknowledged, not acted on again
                    else:
                        outer.accepted.append(delivery)
                        code = 202
                    outer.seen.append({"headers": dict(self.headers), "body": body, "code": code})
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhooks/trm"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    url = create_database("sqlite", tmp_path)
    yield url
    drop_database(url)


@pytest.fixture
def receiver() -> Iterator[GitHubStyleReceiver]:
    found = GitHubStyleReceiver()
    yield found
    found.close()


def notify_attempts(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The webhook delivery attempts among a run's events."""
    return [f["data"] for f in frames if f["type"] == "log" and f["data"]["source"] == "notify"]


def follow(url: str, run_id: str, frames: list[dict[str, Any]], closed: threading.Event) -> None:
    """An SSE follower reading until the server ends the stream."""
    with httpx.stream("GET", f"{url}/runs/{run_id}/events", timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                frames.append(json.loads(line[6:]))
    closed.set()


def test_retried_delivery_keeps_its_id_is_accepted_once_and_followers_see_it(
    env: dict[str, str], migrated: Any, tmp_path: Path, receiver: GitHubStyleReceiver
) -> None:
    (tmp_path / "logs").mkdir()
    service = Service(
        {
            **env,
            "TRM_NOTIFY_SECRET": SECRET,
            "TRM_NOTIFY_BACKOFF_S": "0.2",
            "TRM_NOTIFY_ALLOW": "127.0.0.1",
        },
        tmp_path / "logs",
    )
    frames: list[dict[str, Any]] = []
    closed = threading.Event()
    try:
        service.start_api()
        run = service.submit({"kind": "selftest", "steps": 3, "notify": {"url": receiver.url}})
        # Following from before the worker starts: the follower is there for the whole run.
        threading.Thread(
            target=follow, args=(service.url, run["id"], frames, closed), daemon=True
        ).start()
        service.start_worker()
        service.wait_status(run["id"], "completed", timeout=90)
        wait_for(closed.is_set, timeout=90, what="the event stream to end")
    finally:
        service.stop()

    # Two deliveries of one event: the 500, then the retry; the same id and event name on both.
    assert [r["code"] for r in receiver.seen] == [500, 202]
    terminal = next(f for f in frames if f["type"] == "status" and f["data"].get("terminal"))
    delivery_id = f"{run['id']}:{terminal['id']}"
    for request in receiver.seen:
        headers = request["headers"]
        assert headers["X-Request-ID"] == headers["X-GitHub-Delivery"] == delivery_id
        assert headers["X-GitHub-Event"] == headers["X-TRM-Event"] == "trm.run.completed"
        assert headers["X-TRM-Signature"] == headers["X-Hub-Signature-256"]
        assert json.loads(request["body"])["status"] == "completed"
    assert receiver.accepted == [delivery_id]

    # The follower saw the terminal status, then both attempts; the stream ended at the settled one.
    after = frames[frames.index(terminal) + 1 :]
    attempts = notify_attempts(after)
    assert [(a["attempt"], a["delivered"], a["settled"]) for a in attempts] == [
        (1, False, False),
        (2, True, True),
    ]
    assert frames[-1]["data"] == attempts[-1]
    assert not [f for f in after if f["type"] == "status"]  # the terminal event is the last status


HERMES_ROUTE = """
import asyncio, json, sys
from gateway.config import PlatformConfig
from gateway.platforms.webhook import WebhookAdapter

platform = json.loads(sys.argv[1])


class Captured(WebhookAdapter):
    async def handle_message(self, event):  # the agent is not ours to run: show its prompt
        print(json.dumps({"prompt": event.text, "delivery": event.message_id}), flush=True)


async def main():
    adapter = Captured(PlatformConfig.from_dict(platform))
    assert await adapter.connect(), "could not start the webhook route"
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def docs_route_config(port: int) -> dict[str, Any]:
    """docs/hermes.md's Hermes webhook config, on a free port of this host."""
    text = (ROOT / "docs" / "hermes.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "webhook:" in b]
    platform = yaml.safe_load(block)["platforms"]["webhook"]
    platform["extra"].update(host="127.0.0.1", port=port)
    return dict(platform)


def hermes_serves_webhooks() -> bool:
    """Hermes's webhook platform needs aiohttp, which its base install does not bring."""
    if HERMES_PYTHON is None:
        return False
    probe = [HERMES_PYTHON, "-c", "import aiohttp, gateway.platforms.webhook"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def start_hermes_route(
    platform: dict[str, Any], home: Path
) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """Hermes's webhook route serving `platform`, and the lines it prints (each JSON)."""
    hermes = subprocess.Popen(
        [str(HERMES_PYTHON), "-c", HERMES_ROUTE, json.dumps(platform)],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "HERMES_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    stdout = hermes.stdout
    assert stdout is not None

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return hermes, lines


HERMES_WEBHOOKS = pytest.mark.skipif(
    not hermes_serves_webhooks(),
    reason="hermes-agent with aiohttp is not installed (scripts/hermes_env.sh, or HERMES_PYTHON)",
)


@contextmanager
def a_run_sent_to_hermes(
    env: dict[str, str], tmp_path: Path, platform: dict[str, Any]
) -> Iterator[tuple[dict[str, Any], queue.Queue[str], list[dict[str, Any]]]]:
    """A selftest run whose webhook goes to Hermes's route serving `platform`, followed until its
    delivery settled: the run, the lines Hermes prints, the run's events (Hermes still up)."""
    port = platform["extra"]["port"]
    hermes, lines = start_hermes_route(platform, tmp_path)
    (tmp_path / "logs").mkdir()
    service = Service(
        {
            **env,
            "TRM_NOTIFY_SECRET": platform["extra"]["routes"]["trm"]["secret"],
            "TRM_NOTIFY_ALLOW": f"127.0.0.1:{port}",
        },
        tmp_path / "logs",
    )
    frames: list[dict[str, Any]] = []
    try:
        assert json.loads(lines.get(timeout=60)) == {"ready": True}
        service.start_api()
        service.start_worker()
        url = f"http://127.0.0.1:{port}/webhooks/trm"
        run = service.submit({"kind": "selftest", "steps": 2, "notify": {"url": url}})
        service.wait_status(run["id"], "completed", timeout=90)
        follow(service.url, run["id"], frames, threading.Event())  # ends at the settled attempt
        yield run, lines, frames
    finally:
        service.stop()
        hermes.kill()
        hermes.wait()


@HERMES_WEBHOOKS
def test_a_delivery_hermes_ignores_is_recorded_as_not_delivered(
    env: dict[str, str], migrated: Any, tmp_path: Path
) -> None:
    """A route whose `events` leave out the run's: Hermes answers 200 `{"status": "ignored"}`
    and its agent gets nothing; the run's log says so (it said delivered)."""
    platform = docs_route_config(free_port())
    platform["extra"]["routes"]["trm"]["events"] = ["trm.run.failed"]
    with a_run_sent_to_hermes(env, tmp_path, platform) as (_, lines, frames):
        attempts = notify_attempts(frames)
        assert lines.empty()  # nothing reached Hermes's agent
    assert len(attempts) == 1, attempts
    (only,) = attempts
    assert (only["delivered"], only["ignored"], only["settled"]) == (False, True, True)
    assert "ignored trm.run.completed" in only["message"]


@HERMES_WEBHOOKS
def test_hermes_webhook_route_from_the_docs_takes_a_run_and_renders_its_prompt(
    env: dict[str, str], migrated: Any, tmp_path: Path
) -> None:
    platform = docs_route_config(free_port())
    with a_run_sent_to_hermes(env, tmp_path, platform) as (run, lines, frames):
        # Hermes answers 401 to a signature it cannot verify: then nothing reaches its agent.
        taken = json.loads(lines.get(timeout=60))
    delivered = notify_attempts(frames)
    assert delivered[-1]["delivered"] is True and "ignored" not in delivered[-1]
    assert taken["delivery"].startswith(f"{run['id']}:")
    assert f"TRM run {run['id']} (selftest" in taken["prompt"]
    assert "ended: completed." in taken["prompt"] and "{" not in taken["prompt"]
