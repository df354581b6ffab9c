"""PUT /runs/{id}/artifacts/{path}: a worker on another host hands the API host a file it wrote,
so `GET /runs/{id}/artifacts` works whichever host trained (worker/artifact_sync.py sends them).

The body is streamed to a temporary file next to the target, checked against the
`X-Content-SHA256` header, and renamed into place: a reader never sees half a file, and a file
whose bytes do not match is never kept. Paths cannot leave the run directory (core.paths).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Annotated, BinaryIO

from fastapi import APIRouter, Depends, Header, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlmodel import Session

from app.deps import AppState, session, state
from core.errors import ApiError
from core.paths import safe_artifact
from core.runs import get_run

router = APIRouter(tags=["artifacts"])
SHA256_HEADER = "X-Content-SHA256"
# Names the service writes for itself on each host; a worker's copy would overwrite the API's.
RESERVED = frozenset({"events.jsonl"})


class UploadOut(BaseModel):
    run_id: str
    path: str
    bytes: int
    sha256: str


def _target(run_dir: Path, rel: str) -> Path:
    target = safe_artifact(run_dir, rel)
    parts = Path(rel).parts
    if not parts or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        raise ApiError(400, "bad_path", f"artifact path {rel!r} names a hidden or empty part")
    if rel in RESERVED:
        raise ApiError(409, "reserved", f"{rel!r} is written by the service itself on each host")
    if target.is_dir():
        raise ApiError(409, "conflict", f"{rel!r} is a directory in run {run_dir.name}")
    return target


@router.put("/runs/{run_id}/artifacts/{path:path}", status_code=201, response_model=UploadOut)
async def upload_artifact(
    run_id: str,
    path: str,
    request: Request,
    app: Annotated[AppState, Depends(state)],
    db: Annotated[Session, Depends(session)],
    x_content_sha256: Annotated[str, Header(min_length=64, max_length=64)],
) -> UploadOut:
    """Store one file of run `run_id` (201); a body whose sha256 differs from the header: 422."""
    await run_in_threadpool(get_run, db, run_id)
    expected = x_content_sha256.lower()
    target = _target(app.settings.run_dir(run_id), path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.upload-{uuid.uuid4().hex[:12]}.tmp")
    digest = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as fh:
            async for chunk in request.stream():
                digest.update(chunk)
                size += len(chunk)
                fh.write(chunk)
            await run_in_threadpool(_sync, fh)
        if digest.hexdigest() != expected:
            raise ApiError(
                422,
                "checksum_mismatch",
                f"{path}: the body's sha256 is {digest.hexdigest()}, the header said {expected}",
                {"field": SHA256_HEADER, "path": path},
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return UploadOut(run_id=run_id, path=path, bytes=size, sha256=expected)


def _sync(fh: BinaryIO) -> None:
    fh.flush()
    os.fsync(fh.fileno())
