"""Runs directory not shared: a worker's files reach the API host at the end of each stage, so
`GET /runs/{id}/artifacts` works whichever host trained."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from app.main import create_app
from core.rundir import ARTIFACT_SYNC_STATE
from core.settings import Settings
from tests.claims import claim, headers, queued_run
from tests.conftest import Service, free_port, wait_for
from worker.artifact_sync import sync_stage

SHA = "X-Content-SHA256"


@pytest.fixture
def api(migrated: Settings) -> Iterator[str]:
    """The real application in this process (its uploads route included), on loopback."""
    from app.routes import uploads

    app = create_app(migrated)
    if not any(
        getattr(r, "path", "") == "/runs/{run_id}/artifacts/{path:path}"
        and "PUT" in getattr(r, "methods", ())
        for r in app.routes
    ):
        app.include_router(uploads.router)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _up(url), timeout=20, what="the API to answer")
    yield url
    server.should_exit = True
    thread.join(timeout=10)


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_upload_lands_in_the_api_runs_dir_only_when_the_checksum_matches(
    api: str, migrated: Settings
) -> None:
    run_id = queued_run(migrated)
    credential = claim(migrated, run_id, "loop")
    url = f"{api}/runs/{run_id}/artifacts/loop/model.bin"
    body = b"weights" * 1000
    bad = httpx.put(url, content=body, headers=headers(credential, _sha(b"other")))
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "checksum_mismatch"
    assert not (migrated.run_dir(run_id) / "loop" / "model.bin").exists()
    assert not list(migrated.run_dir(run_id).rglob("*.tmp"))

    good = httpx.put(url, content=body, headers=headers(credential, _sha(body)))
    assert good.status_code == 201, good.text
    assert (migrated.run_dir(run_id) / "loop" / "model.bin").read_bytes() == body
    listed = httpx.get(f"{api}/runs/{run_id}/artifacts").json()["artifacts"]
    assert {"path": "loop/model.bin", "bytes": len(body)} in listed


@pytest.mark.parametrize("path", ["../escape.txt", "a/../../escape.txt", ".hidden", "events.jsonl"])
def test_upload_never_writes_outside_the_run_dir_or_over_its_own_files(
    api: str, migrated: Settings, path: str
) -> None:
    run_id = queued_run(migrated)
    credential = claim(migrated, run_id, "loop")  # the lease holder: only the path is wrong
    response = httpx.put(
        f"{api}/runs/{run_id}/artifacts/{path}",
        content=b"x",
        headers=headers(credential, _sha(b"x")),
    )
    assert response.status_code in (400, 404, 409), response.text
    assert not (migrated.runs_dir / "escape.txt").exists()


def test_upload_to_an_unknown_run_is_404(api: str) -> None:
    response = httpx.put(
        f"{api}/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV/artifacts/x.txt",
        content=b"x",
        headers={SHA: _sha(b"x")},
    )
    assert response.status_code == 404


def test_sync_sends_changed_files_once_and_keeps_local_only_ones(
    api: str, migrated: Settings, tmp_path: Path
) -> None:
    run_id = queued_run(migrated)
    worker_dir = tmp_path / "worker-runs" / run_id
    credential = claim(migrated, run_id, "prepare", run_dir=worker_dir)
    (worker_dir / "prepare" / "manifest.json").write_text('{"status": "completed"}')
    (worker_dir / "events.jsonl").write_text("{}\n")
    (worker_dir / ".checkpoint.tmp").write_text("x")
    worker_settings = migrated.model_copy(update={"artifact_upload_url": api})

    first = sync_stage(worker_settings, run_id, worker_dir, credential=credential)
    assert first.ok and first.uploaded == ["prepare/manifest.json"]
    again = sync_stage(worker_settings, run_id, worker_dir, credential=credential)
    assert again.uploaded == [] and again.unchanged == 1
    time.sleep(0.01)
    (worker_dir / "summary.json").write_text('{"status": "completed"}')
    third = sync_stage(worker_settings, run_id, worker_dir, credential=credential)
    assert third.uploaded == ["summary.json"]

    api_dir = migrated.run_dir(run_id)
    assert (api_dir / "prepare" / "manifest.json").read_text() == '{"status": "completed"}'
    assert (
        not (api_dir / ".checkpoint.tmp").exists() and not (api_dir / ARTIFACT_SYNC_STATE).exists()
    )
    assert (worker_dir / ARTIFACT_SYNC_STATE).exists()


def test_sync_to_a_shared_folder_url(migrated: Settings, tmp_path: Path) -> None:
    worker_dir = tmp_path / "w" / "RUN1"
    (worker_dir / "loop").mkdir(parents=True)
    (worker_dir / "loop" / "manifest.json").write_text("{}")
    shared = tmp_path / "bucket"
    settings = migrated.model_copy(update={"artifact_upload_url": shared.as_uri()})
    result = sync_stage(settings, "RUN1", worker_dir)
    assert result.ok and (shared / "RUN1" / "loop" / "manifest.json").read_text() == "{}"


def test_sync_is_off_without_an_upload_url(migrated: Settings, tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "f.json").write_text("{}")
    result = sync_stage(migrated, "R", tmp_path / "r")
    assert result.target is None and result.uploaded == []


@pytest.mark.slow
def test_two_workers_with_their_own_runs_dirs_both_serve_artifacts_from_the_api(
    env: dict[str, str], service: Service, tmp_path: Path
) -> None:
    dirs = {}
    for queue in ("gpu", "cpu"):
        dirs[queue] = tmp_path / f"host-{queue}" / "runs"
        service.spawn(
            f"worker-{queue}",
            "worker",
            "--queues",
            queue,
            extra_env={
                "TRM_RUNS_DIR": str(dirs[queue]),
                "TRM_ARTIFACT_UPLOAD_URL": service.url,
                "TRM_WORKER_ID": f"host-{queue}",
            },
        )
    runs = {q: service.submit({"kind": "selftest", "steps": 3, "queue": q})["id"] for q in dirs}
    api_dir = Path(env["TRM_RUNS_DIR"])
    for queue, run_id in runs.items():
        done = service.wait_status(run_id, "completed", timeout=90)
        assert done["worker_id"] == f"host-{queue}"
        wait_for(
            lambda rid=run_id: (api_dir / rid / "summary.json").exists(),
            timeout=20,
            what="summary.json to reach the API host",
        )
        listed = service.http.get(f"/runs/{run_id}/artifacts").json()["artifacts"]
        paths = {a["path"] for a in listed}
        assert {"prepare/manifest.json", "loop/manifest.json", "summary.json"} <= paths
        for rel in ("loop/manifest.json", "summary.json"):
            served = service.http.get(f"/runs/{run_id}/artifacts/{rel}")
            assert served.status_code == 200
            assert served.content == (dirs[queue] / run_id / rel).read_bytes()
        # Trained elsewhere: the other host never saw this run.
        other = next(d for q, d in dirs.items() if q != queue)
        assert not (other / run_id).exists()
