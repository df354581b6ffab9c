"""`trm data push | list | show | rm` through a real `trm` subprocess against a live API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Service
from worker.envs import generate

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def trm(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**service.env, "TRM_URL": service.url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "data", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_push_a_folder_then_list_show_and_remove_it_from_the_terminal(
    service: Service, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    generate(logs, families=["route"], worlds=2, episodes=6, seed=0)
    (logs / ".git").mkdir()
    (logs / ".git" / "config").write_text("secret")
    (tmp_path / "elsewhere.jsonl").write_text("{}\n")
    (logs / "link.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")

    pushed = trm(service, "push", str(logs), "--name", "play-logs")
    assert pushed.returncode == 0, pushed.stderr
    out = pushed.stdout
    assert "left out (a link or hidden): .git" in out and "link.jsonl" in out
    digest = re.search(r"^sha256 ([0-9a-f]{64}) \(checked by the server\)$", out, re.M)
    assert digest, out
    assert "families: route" in out
    source = {"type": "trm_play_root", "name": "play-logs", "dataset": "play-logs"}
    assert json.dumps(source) in out

    listed = trm(service, "list")
    assert listed.returncode == 0 and "play-logs" in listed.stdout
    assert digest.group(1)[:12] in listed.stdout
    shown = trm(service, "show", "play-logs")
    assert shown.returncode == 0 and "worlds/" in shown.stdout and "rows " in shown.stdout
    again = trm(service, "push", str(logs), "--name", "play-logs")
    assert again.returncode == 1 and "--replace" in again.stderr
    replaced = trm(service, "push", str(logs), "--name", "play-logs", "--replace")
    assert replaced.returncode == 0 and replaced.stdout.startswith("left out")
    assert "replaced play-logs" in replaced.stdout

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"state": "s", "tools": ["a", "b"], "action": "b"}\n{broken\n')
    single = trm(service, "push", str(rows), "--name", "rows")
    assert single.returncode == 0, single.stderr
    assert "rows.jsonl:2 bad_json" in single.stdout

    assert trm(service, "rm", "play-logs").returncode == 0
    gone = trm(service, "show", "play-logs")
    assert gone.returncode == 1 and "no data set 'play-logs'; known: rows" in gone.stderr
    missing = trm(service, "push", str(tmp_path / "nothing"), "--name", "x")
    assert missing.returncode == 1 and "no such file or folder" in missing.stderr
