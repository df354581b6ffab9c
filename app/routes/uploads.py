"""PUT /runs/{id}/artifacts/{path}: the worker running a run on another host hands the API host a
file it wrote, so `GET /runs/{id}/artifacts` works whichever host trained (worker/artifact_sync.py
sends them). It is a worker's channel, not a client's: an API token alone uploads nothing.

Who and when: only the worker holding the run's lease, proven by the run's upload key (a secret
the claim stores on the run row and the API never shows) and its fencing token, while the run is
`running`. A new attempt replaces the key, so an earlier attempt's worker is fenced out too.

What: only outputs of the run's current stage (the latest stage this attempt started; its sync
runs right after the stage ends, while it is still the latest), as `core.rundir.STAGE_OUTPUTS`
lists them; the runner's summary.json as the attempt ends; the manifests of stages the attempt
skipped; in a dry run, its plan files and planned manifests. Never what each host writes for
itself (events.jsonl, progress snapshot) nor a dot-file. Paths are checked after normalizing:
no empty, `.` or `..` parts, no trailing slash.

How much: one file is at most `TRM_MAX_UPLOAD_BYTES` (413, from Content-Length before the body is
read, or as soon as a streamed body passes it), a run directory at most `TRM_RUN_DIR_QUOTA_BYTES`
(507). The body is streamed to a temporary file next to the target, checked against the
`X-Content-SHA256` header, and renamed into place: a reader never sees half a file, and a file
whose bytes do not match is never kept.
"""

from __future__ import annotations

import errno
import hmac
import os
import time
import uuid
from pathlib import Path
from typing import Annotated, BinaryIO

from fastapi import APIRouter, Depends, Header, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlmodel import Session, col, select

from app.deps import AppState, session, state
from app.streams import receive_body
from core.errors import ApiError
from core.models import Run, Stage
from core.paths import safe_artifact
from core.rundir import (
    ATTEMPT_OUTPUTS,
    HOST_ONLY,
    MANIFEST,
    dry_run_outputs,
    is_output,
    stage_outputs,
)
from core.runs import get_run

router = APIRouter(tags=["artifacts"])
SHA256_HEADER = "X-Content-SHA256"
MAX_PART_BYTES, MAX_PATH_BYTES = 255, 4096  # Linux's NAME_MAX and PATH_MAX


class UploadOut(BaseModel):
    run_id: str
    path: str
    bytes: int
    sha256: str


def normalized(rel: str) -> str:
    """`rel` if it is already a plain relative path (what every check below reads), else 400."""
    if len(rel.encode()) > MAX_PATH_BYTES:
        raise ApiError(
            414,
            "path_too_long",
            f"artifact path is {len(rel.encode())} bytes; at most {MAX_PATH_BYTES}",
            {"field": "path"},
        )
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(ord(c) < 32 for c in rel):
        raise ApiError(
            400,
            "bad_path",
            f"artifact path {rel!r} has an empty, '.' or '..' part, a trailing slash or a "
            "control character; send the plain path relative to the run directory",
            {"field": "path"},
        )
    if any(p.startswith(".") for p in parts):
        raise ApiError(400, "bad_path", f"artifact path {rel!r} names a hidden part")
    long = next((p for p in parts if len(p.encode()) > MAX_PART_BYTES), None)
    if long is not None:
        raise ApiError(
            400,
            "bad_path",
            f"a part of the artifact path is {len(long.encode())} bytes; at most {MAX_PART_BYTES}",
            {"field": "path"},
        )
    return rel


def _forbidden(run_id: str) -> ApiError:
    return ApiError(
        403,
        "upload_forbidden",
        f"uploads to run {run_id} come only from the worker that holds the run (its upload key "
        "and lease token); an API token alone cannot upload",
        {"run_id": run_id},
    )


def _allowed(
    db: Session, run_id: str, key: str | None, lease: str | None
) -> tuple[Run, str, tuple[str, ...]]:
    """The run, the stage it is in, and the paths its lease holder may upload now."""
    run = get_run(db, run_id)
    stored = run.upload_key or ""
    good_key = hmac.compare_digest(stored.encode(), (key or "").encode()) and bool(stored)
    if not good_key or lease is None or lease.strip() != str(run.lease_token):
        raise _forbidden(run_id)
    if run.status != "running":
        raise ApiError(
            409,
            "run_not_running",
            f"run {run_id} is {run.status}: uploads are taken only while it runs",
            {"run_id": run_id, "status": run.status},
        )
    if run.dry_run:
        return run, "dry_run", (*dry_run_outputs(run.kind), *ATTEMPT_OUTPUTS)
    stages = db.exec(
        select(Stage)
        .where(Stage.run_id == run_id, Stage.attempt == run.attempt)
        .order_by(col(Stage.position))
    ).all()
    started = [s for s in stages if s.started_at is not None]
    skipped = tuple(f"{s.name}/{MANIFEST}" for s in stages if s.status == "skipped")
    current = started[-1].name if started else None
    outputs = stage_outputs(run.kind, current) if current else ()
    return run, current or "none started", (*outputs, *ATTEMPT_OUTPUTS, *skipped)


def _check_place(run_dir: Path, rel: str) -> Path:
    target = safe_artifact(run_dir, rel)
    parent = run_dir
    for part in rel.split("/")[:-1]:
        parent = parent / part
        if parent.exists() and not parent.is_dir():
            raise ApiError(
                409, "conflict", f"{rel!r}: {parent.relative_to(run_dir)} is a file, not a folder"
            )
    if target.is_dir():
        raise ApiError(409, "conflict", f"{rel!r} is a folder in run {run_dir.name}")
    return target


# Run id -> (when measured, bytes in its directory). Measured by a walk at most once a minute
# and counted up by each upload meanwhile: a walk per upload would make a sync of N files cost
# N^2 stat calls. Per API process, so with several processes the quota holds within a minute's
# uploads.
_usage: dict[str, tuple[float, int]] = {}
USAGE_TTL_S = 60.0


async def _used(run_dir: Path) -> int:
    seen = _usage.get(run_dir.name)
    now = time.monotonic()
    if seen is None or now - seen[0] > USAGE_TTL_S:
        seen = (now, await run_in_threadpool(_dir_bytes, run_dir))
        _usage[run_dir.name] = seen
        if len(_usage) > 1024:
            _usage.pop(next(iter(_usage)))
    return seen[1]


def _count(run_dir: Path, delta: int) -> None:
    if (seen := _usage.get(run_dir.name)) is not None:
        _usage[run_dir.name] = (seen[0], seen[1] + delta)


def _dir_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile
                continue
    return total


def _quota_error(run_id: str, used: int, size: int, quota: int) -> ApiError:
    return ApiError(
        507,
        "quota_exceeded",
        f"run {run_id}'s directory holds {used} bytes; {size} more would pass its quota of "
        f"{quota} bytes (TRM_RUN_DIR_QUOTA_BYTES)",
        {"run_id": run_id, "used_bytes": used, "upload_bytes": size, "quota_bytes": quota},
    )


def _too_large(path: str, size: int, limit: int) -> ApiError:
    return ApiError(
        413,
        "payload_too_large",
        f"{path}: {size} bytes or more; one upload is at most {limit} bytes (TRM_MAX_UPLOAD_BYTES)",
        {"path": path, "max_bytes": limit},
    )


@router.put(
    "/runs/{run_id}/artifacts/{path:path}",
    summary="Upload a run's file (workers)",
    status_code=201,
    response_model=UploadOut,
)
async def upload_artifact(
    run_id: str,
    path: str,
    request: Request,
    app: Annotated[AppState, Depends(state)],
    db: Annotated[Session, Depends(session)],
    x_content_sha256: Annotated[str, Header(min_length=64, max_length=64)],
    x_upload_key: Annotated[str | None, Header(max_length=200)] = None,
    x_lease_token: Annotated[str | None, Header(max_length=20)] = None,
) -> UploadOut:
    """Store one file of run `run_id` (201): the channel of a worker on another host
    (`TRM_ARTIFACT_UPLOAD_URL`), never a client's. Only the worker holding the run's lease
    (`X-Upload-Key`, `X-Lease-Token`), only while it runs, only an output of its current stage;
    a body whose sha256 differs from `X-Content-SHA256` is a 422."""
    _run, stage, outputs = await run_in_threadpool(
        _allowed, db, run_id, x_upload_key, x_lease_token
    )
    rel = normalized(path)
    if rel in HOST_ONLY:
        raise ApiError(409, "reserved", f"{rel!r} is written by the service itself on each host")
    if not is_output(rel, outputs):
        raise ApiError(
            403,
            "not_stage_output",
            f"{rel!r} is not an output of run {run_id}'s current stage {stage}; it may upload "
            f"{', '.join(outputs) or 'nothing'}",
            {"run_id": run_id, "stage": stage, "allowed": list(outputs)},
        )
    settings = app.settings
    limit, quota = settings.max_upload_bytes, settings.run_dir_quota_bytes
    declared = request.headers.get("content-length", "")
    size_hint = int(declared) if declared.isdigit() else 0
    if size_hint > limit:
        raise _too_large(rel, size_hint, limit)
    run_dir = settings.run_dir(run_id)
    target = _check_place(run_dir, rel)
    used = await _used(run_dir)
    replaced = target.stat().st_size if target.is_file() else 0
    room = quota - (used - replaced)
    if size_hint > room:
        raise _quota_error(run_id, used, size_hint, quota)
    expected = x_content_sha256.lower()
    tmp = target.with_name(f".{target.name}.upload-{uuid.uuid4().hex[:12]}.tmp")

    def bounded(size: int) -> None:
        if size > limit:
            raise _too_large(rel, size, limit)
        if size > room:
            raise _quota_error(run_id, used, size, quota)

    size = 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            sha256, size = await receive_body(request, fh, bounded)
            await run_in_threadpool(_sync, fh)
        if sha256 != expected:
            raise ApiError(
                422,
                "checksum_mismatch",
                f"{rel}: the body's sha256 is {sha256}, the header said {expected}",
                {"field": SHA256_HEADER, "path": rel},
            )
        os.replace(tmp, target)
        _count(run_dir, size - replaced)
    except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:  # raced a writer
        raise ApiError(409, "conflict", f"{rel!r}: {exc.strerror}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ApiError(
                507,
                "disk_full",
                f"no space left on the disk of RUNS_DIR ({settings.runs_dir}) for {rel}",
                {"disk": str(settings.runs_dir)},
            ) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return UploadOut(run_id=run_id, path=rel, bytes=size, sha256=expected)


def _sync(fh: BinaryIO) -> None:
    fh.flush()
    os.fsync(fh.fileno())
