"""The `trm` CLI against a real service: submit, runs, show, watch, cancel."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from app.cli import main
from tests.conftest import ROOT, Service

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
# The API alone (no worker: a submitted run stays queued), one for the module's tests below.
SHARED_SQLITE = pytest.mark.parametrize("shared_service", ["sqlite"], indirect=True)


def trm(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    """`trm ARGS` against the service, run in this process (`python -m app.cli` is `main()`;
    a start of its own cost a second of CPU a call): its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, {"TRM_URL": service.url}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's refusals, `sys.exit(message)`
            code = exit.code if isinstance(exit.code, int) else 1
            if isinstance(exit.code, str):  # what the interpreter prints before it exits
                print(exit.code, file=sys.stderr)
    return subprocess.CompletedProcess(["trm", *args], code, out.getvalue(), err.getvalue())


@SQLITE_ONLY
def test_submit_sample_dry_run_and_watch_it_to_the_end(service: Service) -> None:
    service.start_worker()
    out = trm(service, "submit", str(ROOT / "specs" / "train-routerbench-trm.dry.json"), "--watch")
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split()[0]
    assert out.stdout.rstrip().endswith(f"run {run_id} completed")
    assert "+-- trm run" in out.stdout
    shown = trm(service, "show", run_id)
    assert "prepare_corpus   planned" in shown.stdout
    listed = trm(service, "runs")
    assert run_id in listed.stdout and "completed" in listed.stdout
    once = trm(service, "watch", run_id, "--once")
    lines = once.stdout.rstrip("\n").splitlines()
    assert len(lines) == 7 and len({len(line) for line in lines}) == 1


@SHARED_SQLITE
def test_submit_names_the_bad_field_and_fails(shared_service: Service, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "selftest", "steps": -1}')
    out = trm(shared_service, "submit", str(bad))
    assert out.returncode == 1
    assert "steps" in out.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"kind": \n')
    out = trm(shared_service, "submit", str(broken))
    assert out.returncode != 0 and f"{broken}:2" in out.stderr


@SHARED_SQLITE
def test_cancel_from_the_cli(shared_service: Service) -> None:
    out = trm(shared_service, "submit", str(ROOT / "specs" / "selftest.json"))
    run_id = out.stdout.split()[0]
    cancelled = trm(shared_service, "cancel", run_id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert shared_service.run(run_id)["status"] == "cancelled"


def cli_alone(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m app.cli *args` with no service of the tests', `env` over this environment."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_decide_server_refuses_a_process_count_it_cannot_run(tmp_path: Path) -> None:
    # Before it touches the database (here: none, not migrated): the argument is what to fix.
    out = cli_alone(
        "decide-server", "--workers", "0", TRM_DATABASE_URL=f"sqlite:///{tmp_path / 'none.db'}"
    )
    assert out.returncode == 2
    assert "--workers takes 1 to 64 (got 0)" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_without_a_server_says_so() -> None:
    out = cli_alone("runs", TRM_API_URL="http://127.0.0.1:9")
    assert out.returncode == 1
    assert "cannot reach the API at http://127.0.0.1:9" in out.stderr
    assert "Traceback" not in out.stderr
