"""Uploads are a worker's channel, not a client's: an API token alone writes
nothing into a run; the lease holder writes only outputs of the run's current stage, never the
service's own files, within a size bound and the run directory's quota; /readyz reports free
disk; a full database disk answers 507 naming it. Real API (uvicorn), real database, real
worker where a worker is the point. The tests that claim runs of their own the way a worker does
(tests/claims.py) share an API per database (`shared_service`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import Settings
from tests.claims import claim, headers, queued_run, requeue, start_stage, stored_key
from tests.conftest import Service, wait_for
from tests.fault.conftest import Tmpfs
from worker.artifact_sync import UploadPass


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def put(
    service: Service, run_id: str, path: str, body: bytes, credential: UploadPass | None = None
) -> httpx.Response:
    return service.http.put(
        f"/runs/{run_id}/artifacts/{path}", content=body, headers=headers(credential, sha(body))
    )


def code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


@contextlib.contextmanager
def api_with(env: dict[str, str], logs: Path, **settings: str) -> Iterator[Service]:
    """Its own API process, with `TRM_<NAME>` settings on top of the test's environment."""
    svc = Service({**env, **{f"TRM_{k.upper()}": v for k, v in settings.items()}}, logs)
    svc.start_api()
    try:
        yield svc
    finally:
        svc.stop()


def test_a_token_holder_without_the_upload_key_is_refused_on_queued_running_and_finished_runs(
    service: Service, settings: Settings
) -> None:
    queued = service.submit({"kind": "selftest", "steps": 2})["id"]  # no worker yet
    refused = put(service, queued, "prepare/plan.json", b"{}")
    assert refused.status_code == 403 and code(refused) == "upload_forbidden", refused.text
    assert "worker that holds the run" in refused.json()["error"]["message"]

    service.start_worker()
    slow = service.submit({"kind": "selftest", "steps": 400, "step_seconds": 0.05})["id"]
    service.wait_status(slow, "running")
    key = stored_key(settings, slow)
    assert key
    lease = service.run(slow)["attempt"]  # the first claim's fencing token is 1
    wrong = UploadPass(lease, "x" * len(key))
    for credential in (None, wrong):
        for path in ("loop/result.json", "summary.json", "trainer_config.resolved.json"):
            response = put(service, slow, path, b'{"forged": true}', credential)
            assert response.status_code == 403 and code(response) == "upload_forbidden"
    # The key is the run row's secret: no answer about the run carries it.
    assert key not in service.http.get(f"/runs/{slow}").text
    assert key not in service.http.get("/runs").text
    assert key not in (settings.run_dir(slow) / "events.jsonl").read_text()

    service.wait_status(queued, "completed")
    summary = settings.run_dir(queued) / "summary.json"
    before = summary.read_bytes()
    forged = put(service, queued, "summary.json", b'{"status": "forged"}')
    assert forged.status_code == 403 and code(forged) == "upload_forbidden"
    # Even the finished attempt's own credential no longer uploads: the run is not running.
    late = put(
        service, queued, "summary.json", b"{}", UploadPass(1, str(stored_key(settings, queued)))
    )
    assert late.status_code == 409 and code(late) == "run_not_running", late.text
    assert summary.read_bytes() == before
    service.http.post(f"/runs/{slow}/cancel")


def test_an_earlier_attempts_worker_is_fenced_out_by_the_new_claim(
    shared_service: Service,
) -> None:
    service, settings = shared_service, shared_service.settings
    run_id = queued_run(settings)
    first = claim(settings, run_id, "prepare")
    assert put(service, run_id, "prepare/plan.json", b"{}", first).status_code == 201
    requeue(settings, run_id)  # its worker vanished; the next attempt is claimed elsewhere
    second = claim(settings, run_id, "prepare", worker="other-host:2", attempt=2)
    assert second.key != first.key and second.lease_token == first.lease_token + 1
    old = put(service, run_id, "prepare/plan.json", b'{"old": 1}', first)
    assert old.status_code == 403 and code(old) == "upload_forbidden"
    stale_token = UploadPass(first.lease_token, second.key)
    assert put(service, run_id, "prepare/plan.json", b"{}", stale_token).status_code == 403
    assert put(service, run_id, "prepare/plan.json", b'{"new": 1}', second).status_code == 201


# (path, status, error code): each on a run of its own, one service for all (an API start per
# case cost more than the cases).
NOT_THE_HOLDERS = [
    ("events.jsonl/", 400, "bad_path"),
    ("./summary.json", 400, "bad_path"),
    ("loop/../events.jsonl", 400, "bad_path"),
    ("loop//result.json", 400, "bad_path"),
    ("loop/.child.json", 400, "bad_path"),
    ("events.jsonl", 409, "reserved"),
    ("progress.snapshot.json", 409, "reserved"),
    ("train/manifest.json", 403, "not_stage_output"),
    ("prepare/manifest.json", 403, "not_stage_output"),
    ("spec.resolved.json", 403, "not_stage_output"),
]


def test_the_lease_holder_cannot_replace_the_services_own_files(
    shared_service: Service,
) -> None:
    service, settings = shared_service, shared_service.settings
    for path, status, error in NOT_THE_HOLDERS:
        run_id = queued_run(settings)
        credential = claim(settings, run_id, "prepare")
        assert put(service, run_id, "prepare/plan.json", b"{}", credential).status_code == 201
        start_stage(settings, run_id, "loop")  # the same attempt moves on
        events = settings.run_dir(run_id) / "events.jsonl"
        before = events.read_bytes()
        # Sent byte for byte: an HTTP client would fold the dot segments away before sending.
        got, body = raw_put(service.port, f"/runs/{run_id}/artifacts/{path}", credential)
        assert got == status and body["error"]["code"] == error, (path, body)
        assert not (settings.run_dir(run_id) / "summary.json").exists(), path
        assert events.read_bytes()[: len(before)] == before, path
        assert events.stat().st_size >= len(before), path


def raw_put(port: int, target: str, credential: UploadPass) -> tuple[int, dict[str, Any]]:
    """PUT an empty body to `target` as written; (status, JSON body)."""
    head = (
        f"PUT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n"
        f"X-Content-SHA256: {sha(b'')}\r\nX-Upload-Key: {credential.key}\r\n"
        f"X-Lease-Token: {credential.lease_token}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode())
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """One HTTP response with a Content-Length: (status, JSON body)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, body = answer.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ", 2)[1]), json.loads(body[:length])


def test_only_outputs_of_the_current_stage_are_taken(
    shared_service: Service, route_corpus: Path
) -> None:
    service, settings = shared_service, shared_service.settings
    data = settings.data_dir / "route"
    data.mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl"):
        (data / name).write_text((route_corpus / name).read_text())
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": {"hidden": 16, "max_steps": 4},
        "corpus": {"sources": [{"type": "jsonl", "name": "r", "path": "route"}]},
    }
    run_id = queued_run(settings, spec)
    credential = claim(settings, run_id, "prepare_corpus")
    # The attack: a resolved trainer config planted before prepare_config runs.
    forged = json.dumps({"output_dir": "/tmp/elsewhere"}).encode()
    refused = put(service, run_id, "trainer_config.resolved.json", forged, credential)
    assert refused.status_code == 403 and code(refused) == "not_stage_output"
    detail = refused.json()["error"]
    assert "prepare_corpus" in detail["message"] and "corpus/" in detail["details"]["allowed"]
    assert not (settings.run_dir(run_id) / "trainer_config.resolved.json").exists()
    for path in ("trainer/checkpoints/step-000002/checkpoint.json", "scorecard.json"):
        assert put(service, run_id, path, b"{}", credential).status_code == 403
    taken = put(service, run_id, "corpus/train.jsonl", b'{"x": 1}\n', credential)
    assert taken.status_code == 201, taken.text
    assert put(service, run_id, "prepare_corpus/child.log", b"ok\n", credential).status_code == 201


def test_over_long_paths_and_paths_through_files_are_client_errors(
    shared_service: Service,
) -> None:
    service, settings = shared_service, shared_service.settings
    run_id = queued_run(settings)
    credential = claim(settings, run_id, "loop")
    long_part = put(service, run_id, f"loop/{'a' * 300}", b"x", credential)
    assert long_part.status_code == 400 and code(long_part) == "bad_path"
    long_path = put(service, run_id, "loop/" + "/".join(["b" * 200] * 25), b"x", credential)
    assert long_path.status_code == 414 and code(long_path) == "path_too_long"
    assert put(service, run_id, "loop/result.json", b"{}", credential).status_code == 201
    under_file = put(service, run_id, "loop/result.json/x", b"x", credential)
    assert under_file.status_code == 409 and code(under_file) == "conflict", under_file.text
    assert put(service, run_id, "loop/sub/x.json", b"{}", credential).status_code == 201
    onto_dir = put(service, run_id, "loop/sub", b"x", credential)
    assert onto_dir.status_code == 409 and code(onto_dir) == "conflict"
    assert (settings.run_dir(run_id) / "loop" / "result.json").read_bytes() == b"{}"


def test_an_upload_over_the_size_bound_is_refused_before_its_body_is_read(
    env: dict[str, str], migrated: Settings, tmp_path: Path
) -> None:
    with api_with(env, tmp_path / "logs", max_upload_bytes="1000") as api:
        run_id = queued_run(migrated)
        credential = claim(migrated, run_id, "loop")
        declared = 10 * 1024**3  # announced, never sent: the answer must not wait for it
        head = (
            f"PUT /runs/{run_id}/artifacts/loop/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Length: {declared}\r\nX-Content-SHA256: {'0' * 64}\r\n"
            f"X-Upload-Key: {credential.key}\r\nX-Lease-Token: {credential.lease_token}\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", api.port), timeout=30) as sock:
            sock.sendall(head.encode() + b"x" * 100)
            status, body = read_answer(sock)
        assert status == 413 and body["error"]["code"] == "payload_too_large", body
        assert "TRM_MAX_UPLOAD_BYTES" in body["error"]["message"]

        def streamed() -> Iterator[bytes]:  # no Content-Length: refused once it passes the bound
            for _ in range(20):
                yield b"y" * 256

        response = api.http.put(
            f"/runs/{run_id}/artifacts/loop/streamed.bin",
            content=streamed(),
            headers=headers(credential, "0" * 64),
        )
        assert response.status_code == 413 and code(response) == "payload_too_large"
        loop = migrated.run_dir(run_id) / "loop"
        assert not (loop / "streamed.bin").exists() and not list(loop.glob(".*.tmp"))
        fits = api.http.put(
            f"/runs/{run_id}/artifacts/loop/small.bin",
            content=b"z" * 1000,
            headers=headers(credential, sha(b"z" * 1000)),
        )
        assert fits.status_code == 201, fits.text


def test_an_upload_past_the_run_dir_quota_gets_507_with_the_figures(
    env: dict[str, str], migrated: Settings, tmp_path: Path
) -> None:
    with api_with(env, tmp_path / "logs", run_dir_quota_bytes="20000") as api:
        run_id = queued_run(migrated)
        credential = claim(migrated, run_id, "loop")
        used = sum(p.stat().st_size for p in migrated.run_dir(run_id).rglob("*") if p.is_file())
        first = b"a" * (15000 - used)
        url = f"/runs/{run_id}/artifacts/loop/a.bin"
        assert (
            api.http.put(url, content=first, headers=headers(credential, sha(first))).status_code
            == 201
        )
        more = b"b" * 6000
        over = api.http.put(
            f"/runs/{run_id}/artifacts/loop/b.bin",
            content=more,
            headers=headers(credential, sha(more)),
        )
        assert over.status_code == 507 and code(over) == "quota_exceeded", over.text
        details = over.json()["error"]["details"]
        assert details["run_id"] == run_id and details["quota_bytes"] == 20000
        assert details["upload_bytes"] == 6000 and details["used_bytes"] >= 15000
        assert run_id in over.json()["error"]["message"]
        assert not (migrated.run_dir(run_id) / "loop" / "b.bin").exists()
        # Replacing a file counts only the difference.
        again = b"c" * (len(first) + 3000)
        assert (
            api.http.put(url, content=again, headers=headers(credential, sha(again))).status_code
            == 201
        )


def test_readyz_reports_free_disk_and_is_not_ready_below_the_floor(
    env: dict[str, str], migrated: Settings, tmp_path: Path
) -> None:
    with api_with(env, tmp_path / "logs") as api:
        body = api.http.get("/readyz").json()
        disk = body["checks"]["disk"]
        assert disk["ok"] and disk["min_free_bytes"] == 512 * 1024**2
        assert disk["runs_dir"]["free_bytes"] > 0
        if migrated.database_url.startswith("sqlite"):
            assert disk["database"]["free_bytes"] > 0
        else:  # the server's disk is not visible from the API host: said, not guessed
            assert disk["database"]["free_bytes"] == "n/a"
    with api_with(env, tmp_path / "logs2", min_free_bytes=str(10**18)) as api:
        response = api.http.get("/readyz")
        assert response.status_code == 503
        assert response.json()["ready"] is False
        assert response.json()["checks"]["disk"]["runs_dir"]["ok"] is False


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_full_database_disk_answers_507_naming_it(env: dict[str, str], tmp_path: Path) -> None:
    from core.db import upgrade

    disk = Tmpfs(tmp_path / "small-disk", "4m")
    try:
        url = f"sqlite:///{disk.path}/trm.db"
        upgrade(url)
        with api_with({**env, "TRM_DATABASE_URL": url}, tmp_path / "logs") as api:
            filler = disk.fill()
            answers: list[httpx.Response] = []
            for i in range(50):  # a few may still fit in free pages of the file
                spec = {"kind": "selftest", "steps": 1, "name": f"{'x' * 150}{i}"}
                answers.append(api.http.post("/runs", json=spec))
                if answers[-1].status_code != 202:
                    break
            last = answers[-1]
            assert last.status_code == 507 and code(last) == "disk_full", last.text
            message = last.json()["error"]["message"]
            assert "database" in message and str(disk.path) in message
            filler.unlink()
            wait_for(
                lambda: (
                    api.http.post("/runs", json={"kind": "selftest", "steps": 1}).status_code == 202
                ),
                timeout=30,
                what="runs to be taken again once there is room",
            )
    finally:
        disk.unmount()


@pytest.mark.slow
def test_a_worker_on_another_host_still_delivers_every_stage_output(
    env: dict[str, str], service: Service, tmp_path: Path
) -> None:
    worker_runs = tmp_path / "worker-host" / "runs"
    service.start_worker(
        "worker-host",
        extra_env={"TRM_RUNS_DIR": str(worker_runs), "TRM_ARTIFACT_UPLOAD_URL": service.url},
    )
    api_dir = Path(env["TRM_RUNS_DIR"])
    real = service.submit({"kind": "selftest", "steps": 3})["id"]
    dry = service.submit({"kind": "selftest", "steps": 3, "dry_run": True})["id"]
    for run_id in (real, dry):
        service.wait_status(run_id, "completed", timeout=90)
    expected = {
        real: [
            "prepare/plan.json",
            "prepare/manifest.json",
            "loop/result.json",
            "loop/checkpoint.json",
            "loop/manifest.json",
            "loop/child.log",
            "summary.json",
        ],
        dry: ["spec.resolved.json", "prepare/manifest.json", "loop/manifest.json", "summary.json"],
    }
    for run_id, paths in expected.items():
        for rel in paths:
            wait_for(
                (api_dir / run_id / rel).exists,
                timeout=20,
                what=f"{rel} of {run_id} to reach the API host",
            )
            assert (api_dir / run_id / rel).read_bytes() == (
                worker_runs / run_id / rel
            ).read_bytes()
        # Every file the worker sent was taken: no sync reported a refusal.
        events = [json.loads(line) for line in (worker_runs / run_id / "events.jsonl").open()]
        syncs = [e["data"] for e in events if e.get("data", {}).get("source") == "artifact_sync"]
        assert syncs and all(not s["failed"] for s in syncs), syncs


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_train_run_on_another_host_delivers_every_stage_output_the_table_names(
    env: dict[str, str], service: Service, settings: Settings, route_corpus: Path, tmp_path: Path
) -> None:
    worker_runs = tmp_path / "worker-host" / "runs"
    data = settings.data_dir / "route"
    data.mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl"):
        (data / name).write_text((route_corpus / name).read_text())
    service.start_worker(
        "worker-host",
        extra_env={"TRM_RUNS_DIR": str(worker_runs), "TRM_ARTIFACT_UPLOAD_URL": service.url},
    )
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": {"hidden": 16, "max_steps": 4, "checkpoint_every": 2},
        "corpus": {"sources": [{"type": "jsonl", "name": "r", "path": "route"}]},
    }
    run_id = service.submit(spec)["id"]
    assert service.wait_status(run_id, "completed", "failed", timeout=240)["status"] == "completed"
    api_dir, own = Path(env["TRM_RUNS_DIR"]) / run_id, worker_runs / run_id
    sent = {
        p.relative_to(own).as_posix()
        for p in own.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(own).parts)
    } - {"events.jsonl", "progress.snapshot.json"}
    assert {"corpus/manifest.json", "trainer_config.resolved.json", "scorecard.json"} <= sent
    assert any(p.startswith("trainer/checkpoints/") for p in sent)
    for rel in sorted(sent):  # every file the worker wrote reached the API host, byte for byte
        assert (api_dir / rel).read_bytes() == (own / rel).read_bytes(), rel
    events = [json.loads(line) for line in (own / "events.jsonl").open()]
    syncs = [e["data"] for e in events if e.get("data", {}).get("source") == "artifact_sync"]
    assert syncs and all(not s["failed"] for s in syncs), syncs
