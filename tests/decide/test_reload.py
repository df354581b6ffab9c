"""Calls to a real decision process (`trm decide-server` under uvicorn, a SQLite registry; two
processes on the one port, `--workers 2`) while its controller's live version moves back
and forth and a new version is promoted and loaded: every call is answered, in full, by one
version, with that version's own decisions."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlmodel import Session

from core.controllers import rollback
from core.db import make_engine, upgrade
from core.models import Controller, ControllerVersion
from tests.decide.conftest import TinyRun
from tests.stack import free_port, wait_for
from worker.decide.controller import DecideRow, load_controller
from worker.models.rows import read_rows

ROOT = Path(__file__).resolve().parents[2]
NAME = "flipping"
CALLS = 40  # calls per client
CLIENTS = 4
ROWS_PER_CALL = 3


class Registry:
    def __init__(self, url: str, runs_dir: Path) -> None:
        self.url, self.runs_dir = url, runs_dir
        self.engine = make_engine(url)

    def add_version(self, version: int, run: TinyRun) -> None:
        with Session(self.engine) as session:
            session.add(
                ControllerVersion(
                    name=NAME,
                    version=version,
                    run_id=f"run-{version}",
                    source_run_id=f"run-{version}",
                    trainer=run.trainer,
                    trainer_dir=str(run.trainer_dir.relative_to(self.runs_dir)),
                    promoted_by="tests/decide/test_reload.py",
                )
            )
            if session.get(Controller, NAME) is None:
                session.add(Controller(name=NAME, live_version=version))
            session.commit()


def serving(pid: int) -> list[int]:
    """The serving processes `pid` started (uvicorn's, under `--workers`: multiprocessing's
    spawned children, its resource tracker left out)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


# Two processes on the one port (`--workers 2`): the one-process server is what every other
# test of the decision process starts (tests/stack.py `start_decider`).
WORKERS = 2


@pytest.fixture
def decider(tmp_path: Path, trm_run: TinyRun, gbdt_run: TinyRun) -> Iterator[tuple[str, Registry]]:
    runs_dir = Path(os.path.commonpath([trm_run.root, gbdt_run.root]))
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url)
    registry = Registry(url, runs_dir)
    registry.add_version(1, trm_run)
    registry.add_version(2, gbdt_run)
    port = free_port()
    env = {**os.environ, "TRM_DATABASE_URL": url, "TRM_RUNS_DIR": str(runs_dir)}
    env.pop("TRM_API_TOKEN", None)
    log = (tmp_path / "decide-server.log").open("wb")
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "app.cli", "decide-server", "--port", str(port)),
            *("--workers", str(WORKERS)),
        ],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return server.poll() is not None

    try:
        wait_for(up, timeout=90, what="the decision process")
        assert server.poll() is None, (tmp_path / "decide-server.log").read_text()
        # uvicorn's processes on the one socket, each with its own versions
        assert len(serving(server.pid)) == WORKERS
        yield base, registry
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_calls_while_versions_move_are_answered_in_full_by_one_version(
    decider: tuple[str, Registry], trm_run: TinyRun, gbdt_run: TinyRun
) -> None:
    base, registry = decider
    found = read_rows(trm_run.corpus / "anchor.jsonl")
    rows = [DecideRow(r["state"], list(r["tools"])) for r in found]
    runs = {1: trm_run, 2: gbdt_run, 3: trm_run}
    # Each version's own answers, decided here from the same files.
    expected: dict[int, Any] = {}
    for version, run in runs.items():
        controller = load_controller(run.trainer_dir, run.trainer)
        expected[version] = (controller.model_hash, controller.decide(rows))

    def client(k: int) -> list[tuple[list[int], dict[str, Any]]]:
        out = []
        with httpx.Client(base_url=base, timeout=60) as http:
            for c in range(CALLS):
                picked = [(k * CALLS + c + j) % len(rows) for j in range(ROWS_PER_CALL)]
                body = {
                    "controller": NAME,
                    "rows": [{"state": rows[i].state, "tools": rows[i].tools} for i in picked],
                }
                answer = http.post("/decide", json=body)
                assert answer.status_code == 200, answer.text
                out.append((picked, answer.json()))
        return out

    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(client, k) for k in range(CLIENTS)]
        flips = 0
        while not all(f.done() for f in futures):
            if flips == 10:  # a new version mid-way: loaded while calls arrive
                registry.add_version(3, runs[3])
            rollback(registry.engine, NAME, (1, 2, 3)[flips % 3] if flips >= 10 else 1 + flips % 2)
            flips += 1
        answers = [a for f in futures for a in f.result()]

    assert len(answers) == CLIENTS * CALLS
    seen = set()
    for picked, answer in answers:
        version = answer["version"]
        model_hash, decisions = expected[version]
        seen.add(version)
        assert answer["model_hash"] == model_hash
        assert answer["trainer"] == runs[version].trainer
        assert len(answer["decisions"]) == len(picked)
        for i, got in zip(picked, answer["decisions"], strict=True):
            assert got["action"] == decisions[i].action
            np.testing.assert_allclose(got["scores"], decisions[i].scores, atol=1e-5)
    assert flips > 10 and len(seen) >= 2, (flips, seen)
