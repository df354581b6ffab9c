"""Runs directory not shared: after each stage, a worker copies what it wrote in the run directory
to the API host, so `GET /runs/{id}/artifacts` works whichever host trained (SPEC §11).

Off unless `TRM_ARTIFACT_UPLOAD_URL` is set (one box, or a RUNS_DIR shared over NFS, needs none):
- `http://api-host:8000` (or https): each changed file is PUT to `/runs/{id}/artifacts/{path}`
  with its sha256 (app/routes/uploads.py), with `TRM_API_TOKEN` as the bearer token and the
  attempt's upload credential (the run's upload key and lease token, from the claim): the API
  takes a file only from the lease holder, and only an output of the run's current stage, so the
  runner syncs each stage's outputs (`core.rundir.stage_outputs`) right after the stage ends and
  summary.json before the run's terminal status;
- `file:///mnt/trm-runs`: each changed file is copied under `<that folder>/<run id>/`, atomically
  (a shared folder or a mounted object store bucket that the API host uses as its RUNS_DIR).

Only files changed since the last sync of the run are sent (size, mtime and sha256 are kept in
`<run dir>/.artifact-sync.json`). A failed upload never fails the run: it is tried 3 times, then
the file stays on the worker and the failure is logged and recorded as a `log` event.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from core.rundir import (
    ARTIFACT_SYNC_STATE,
    CHUNK,
    HOST_ONLY,
    LEASE_TOKEN_HEADER,
    UPLOAD_KEY_HEADER,
    atomic_file,
    sha256_file,
)
from core.settings import Settings

log = logging.getLogger("trm.worker")

# Each host writes these for itself (the API host its own events.jsonl); the API refuses them.
LOCAL_ONLY = HOST_ONLY
ATTEMPTS = 3
BACKOFF_S = 0.5
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class UploadPass:
    """An attempt's upload credential: the run's upload key and lease token from the claim."""

    lease_token: int
    key: str


@dataclass
class SyncResult:
    target: str | None = None
    uploaded: list[str] = field(default_factory=list)
    unchanged: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


def upload_url(settings: Settings) -> str | None:
    value = getattr(settings, "artifact_upload_url", None)
    return str(value).rstrip("/") if value else None


def sync_stage(
    settings: Settings,
    run_id: str,
    run_dir: Path,
    paths: list[Path] | None = None,
    publisher: Any = None,
    credential: UploadPass | None = None,
) -> SyncResult:
    """Send the files under `paths` (files or folders; relative ones are inside `run_dir`; None
    means the whole run directory) that changed since the last sync. Never raises for a transfer:
    failures come back in the result (and as a `log` event when a publisher is given)."""
    target = upload_url(settings)
    result = SyncResult(target=target)
    if target is None or not run_dir.is_dir():
        return result
    state_path = run_dir / ARTIFACT_SYNC_STATE
    state = _load_state(state_path)
    sender = (
        _HttpSender(target, settings, credential)
        if target.startswith("http")
        else _FolderSender(target)
    )
    try:
        for file in _files(run_dir, paths):
            rel = file.relative_to(run_dir).as_posix()
            stat = file.stat()
            seen = state.get(rel)
            if seen and seen[0] == stat.st_size and seen[1] == stat.st_mtime_ns:
                result.unchanged += 1
                continue
            digest = sha256_file(file)
            if seen and seen[2] == digest:
                state[rel] = [stat.st_size, stat.st_mtime_ns, digest]
                result.unchanged += 1
                continue
            error = sender.send(run_id, rel, file, digest)
            if error is None:
                state[rel] = [stat.st_size, stat.st_mtime_ns, digest]
                result.uploaded.append(rel)
            else:
                result.failed[rel] = error
    finally:
        sender.close()
        _save_state(state_path, state)
    if result.failed:
        log.warning("artifact sync of %s: %d file(s) not sent", run_id, len(result.failed))
    if publisher is not None and (result.uploaded or result.failed):
        _record(publisher, run_id, result)
    return result


def _files(run_dir: Path, paths: list[Path] | None) -> list[Path]:
    roots = [run_dir] if paths is None else [p if p.is_absolute() else run_dir / p for p in paths]
    found: set[Path] = set()
    resolved_dir = run_dir.resolve()
    for root in roots:
        candidates = sorted(root.rglob("*")) if root.is_dir() else [root]
        for file in candidates:
            if not file.is_file() or file.is_symlink():
                continue
            try:
                rel = file.resolve().relative_to(resolved_dir)
            except ValueError:  # outside the run directory: never ours to send
                continue
            if rel.as_posix() in LOCAL_ONLY or any(p.startswith(".") for p in rel.parts):
                continue
            found.add(run_dir / rel)
    return sorted(found)


def _load_state(path: Path) -> dict[str, list[Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(path: Path, state: dict[str, list[Any]]) -> None:
    try:
        with atomic_file(path) as fh:
            fh.write(json.dumps(state, sort_keys=True))
    except OSError as exc:  # next sync sends a little more; nothing is lost
        log.warning("could not save %s: %s", path, exc)


class _HttpSender:
    def __init__(
        self, base_url: str, settings: Settings, credential: UploadPass | None = None
    ) -> None:
        headers = {"User-Agent": "trm-worker-artifact-sync/1"}
        if settings.api_token is not None:
            headers["Authorization"] = f"Bearer {settings.api_token.get_secret_value()}"
        if credential is not None:
            headers[UPLOAD_KEY_HEADER] = credential.key
            headers[LEASE_TOKEN_HEADER] = str(credential.lease_token)
        self.base_url = base_url
        self.client = httpx.Client(timeout=TIMEOUT_S, headers=headers)

    def send(self, run_id: str, rel: str, file: Path, digest: str) -> str | None:
        url = f"{self.base_url}/runs/{quote(run_id)}/artifacts/{quote(rel)}"
        error = "not tried"
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with open(file, "rb") as fh:
                    response = self.client.put(
                        url,
                        content=_chunks(fh),
                        headers={
                            "X-Content-SHA256": digest,
                            "Content-Type": "application/octet-stream",
                            "Content-Length": str(file.stat().st_size),
                        },
                    )
            except (OSError, httpx.HTTPError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in (200, 201):
                    return None
                error = f"HTTP {response.status_code}: {response.text[:300]}"
                # A 4xx is the API refusing this file (bad path, checksum, auth): trying again
                # with the same bytes cannot help. 408/429 and 5xx may pass later.
                if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                    return error
            if attempt < ATTEMPTS:
                time.sleep(BACKOFF_S * 2 ** (attempt - 1))
        return error

    def close(self) -> None:
        self.client.close()


def _chunks(fh: Any) -> Any:
    while chunk := fh.read(CHUNK):
        yield chunk


class _FolderSender:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "file":
            raise ValueError(f"TRM_ARTIFACT_UPLOAD_URL {url!r}: use http(s):// or file://")
        self.root = Path(unquote(parts.path))

    def send(self, run_id: str, rel: str, file: Path, digest: str) -> str | None:
        run_dir = self.root / run_id
        target = run_dir / rel
        tmp = target.with_name(f".{target.name}.upload-{uuid.uuid4().hex[:12]}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, tmp)
            if sha256_file(tmp) != digest:
                return f"{rel}: the copy's sha256 differs (the file changed while copying)"
            os.replace(tmp, target)
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            tmp.unlink(missing_ok=True)
        return None

    def close(self) -> None:
        pass


def _record(publisher: Any, run_id: str, result: SyncResult) -> None:
    message = f"artifact sync to {result.target}: {len(result.uploaded)} file(s) sent"
    if result.failed:
        message += f", {len(result.failed)} failed (kept on this worker; retried next stage)"
    data = {
        "source": "artifact_sync",
        "level": "warning" if result.failed else "info",
        "message": message,
        "target": result.target,
        "uploaded": result.uploaded[:50],
        "uploaded_count": len(result.uploaded),
        "failed": dict(list(result.failed.items())[:20]),
    }
    try:
        publisher.publish(run_id, "log", data)
    except Exception as exc:  # the record is a convenience; the files are what matter
        log.warning("could not record artifact sync for %s: %s", run_id, exc)
