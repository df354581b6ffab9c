"""Data sets: `PUT /datasets/{name}` (upload), `GET /datasets`, `GET /datasets/{name}` (what a
dry corpus build would read), `DELETE /datasets/{name}`. What an archive may hold, and where a
data set lives, is core/datasets.py; what the show reads, core/dataset_show.py.

The upload is the body itself (a tar, tar.gz, zip or one JSONL file), streamed to disk in chunks
and never held in memory: its `Content-Length` is checked against `TRM_MAX_DATASET_BYTES` before
a byte is read (413), and so is the running count for a body sent without one. `X-Content-SHA256`
(the body's sha256, hex) is required and checked against what arrived (422), so a cut or altered
upload is never kept. Same token as every state-changing route; app/guard.py lets a PUT carry
its own content type (the Origin and Host checks still apply).
"""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlmodel import Session

from app.deps import AppState, caller, session, state
from app.streams import receive_body
from core import datasets
from core.dataset_show import DatasetShow, show
from core.dataset_unpack import Limits, over_quota, refuse, sniff, unpack
from core.datasets import DatasetMeta
from core.errors import ApiError

router = APIRouter(tags=["datasets"])
SHA256_HEADER = "X-Content-SHA256"
HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
# What a client may say the body is; none at all is fine too (the first bytes decide).
CONTENT_TYPES = frozenset(
    {
        "application/octet-stream",
        "application/x-tar",
        "application/tar",
        "application/gzip",
        "application/x-gzip",
        "application/x-compressed-tar",
        "application/zip",
        "application/x-zip-compressed",
        "application/x-ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/json",
    }
)
FILENAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,200}\.jsonl$")


class DatasetList(BaseModel):
    datasets: list[DatasetMeta]
    data_dir: str


class Pushed(BaseModel):
    dataset: DatasetMeta
    replaced: bool
    show: DatasetShow


def _too_large(size: int, limit: int) -> ApiError:
    return refuse(
        413,
        "payload_too_large",
        f"the upload is {size} bytes or more; a data set upload is at most {limit} bytes "
        "(TRM_MAX_DATASET_BYTES): split the logs into several data sets, or ask the operator "
        "to raise it",
        "body",
    )


def _check_headers(request: Request, sha256: str | None, limit: int) -> str:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind and kind not in CONTENT_TYPES:
        raise refuse(
            415,
            "unsupported_media_type",
            f"Content-Type {kind[:100]!r} is not an archive; send a .tar, .tar.gz or .zip "
            "(application/x-tar, application/gzip, application/zip) or one .jsonl file "
            "(application/x-ndjson)",
            "Content-Type",
        )
    if sha256 is None or not HEX64.fullmatch(sha256):
        raise refuse(
            400,
            "checksum_required",
            f"send the body's sha256 as 64 hex digits in the {SHA256_HEADER} header "
            "(`sha256sum FILE`; trm data push sends it)",
            SHA256_HEADER,
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    return sha256.lower()


BINARY = {"schema": {"type": "string", "format": "binary"}}
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            kind: BINARY
            for kind in (
                "application/gzip",
                "application/x-tar",
                "application/zip",
                "application/x-ndjson",
            )
        },
    }
}
UPLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "no X-Content-SHA256, or not 64 hex digits"},
    409: {"description": "the name is taken (without replace), or a run reads it"},
    413: {"description": "over TRM_MAX_DATASET_BYTES, _FILES or _UNPACKED_BYTES"},
    415: {"description": "a content type that is not an archive"},
    422: {"description": "checksum mismatch, unknown format, an unsafe member, a bad name"},
    507: {"description": "no space left in TRM_DATA_DIR, or over TRM_MAX_DATASETS_BYTES"},
}


@router.put(
    "/datasets/{name}",
    summary="Push a data set",
    status_code=201,
    response_model=Pushed,
    openapi_extra=UPLOAD_BODY,
    responses=UPLOAD_ERRORS,
)
async def push_dataset(
    name: str,
    request: Request,
    app: Annotated[AppState, Depends(state)],
    db: Annotated[Session, Depends(session)],
    x_content_sha256: Annotated[
        str | None, Header(description="required: the body's sha256, 64 hex digits")
    ] = None,
    replace: Annotated[
        bool, Query(description="replace a data set of this name (409 while a run reads it)")
    ] = False,
    filename: Annotated[
        str | None, Query(description="a single .jsonl's name in the data set")
    ] = None,
) -> Pushed:
    """Upload data set `name` (201): the body is a .tar, .tar.gz, .zip or one .jsonl file
    (`filename`, default `<name>.jsonl`). An existing name is a 409 unless `replace=true`."""
    settings = app.settings
    datasets.check_name(name)
    limit = settings.max_dataset_bytes
    expected = _check_headers(request, x_content_sha256, limit)
    if filename is not None and not FILENAME.fullmatch(filename):
        raise refuse(
            422,
            "validation_error",
            f"query.filename: {filename[:100]!r} must be a plain name ending in .jsonl",
            "query.filename",
        )
    data_dir = settings.data_dir
    present = (datasets.folder_of(data_dir, name) / datasets.META).is_file()
    if present and not replace:
        raise datasets.exists(name)
    if present:
        readers = await run_in_threadpool(datasets.readers, db, data_dir, name)
        if readers:
            raise datasets.in_use(readers, name, "replace it")
    await run_in_threadpool(_check_room, request, data_dir, settings.min_free_bytes)
    quota = settings.max_datasets_bytes
    used = await run_in_threadpool(datasets.used_bytes, data_dir, name if present else None)
    if used >= quota:
        raise over_quota(used, quota)
    scratch = await run_in_threadpool(datasets.incoming, data_dir)
    try:
        body = scratch / "upload"

        def bounded(size: int) -> None:
            if size > limit:
                raise _too_large(size, limit)

        with body.open("wb") as fh:
            sha256, size = await receive_body(request, fh, bounded)
        if sha256 != expected:
            raise refuse(
                422,
                "checksum_mismatch",
                f"the body's sha256 is {sha256}, {SHA256_HEADER} said {expected}: "
                "the upload was cut or altered on the way; send it again",
                SHA256_HEADER,
            )
        fmt = await run_in_threadpool(sniff, body)
        if fmt is None:
            raise refuse(
                422,
                "unknown_format",
                "the body is not a tar, tar.gz or zip archive, nor a JSONL file (its first "
                "bytes say none of these); send the folder of logs as one of them",
                "body",
            )
        tree = scratch / "tree"
        limits = Limits(
            settings.max_dataset_files, settings.max_dataset_unpacked_bytes, quota, used
        )
        unpacked = await run_in_threadpool(
            unpack, body, fmt, tree, limits, filename or f"{name}.jsonl"
        )
        meta = datasets.new_meta(name, expected, size, fmt, unpacked, caller(request))
        await run_in_threadpool(datasets.install, tree, meta, data_dir, scratch, present, quota)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ApiError(
                507,
                "disk_full",
                f"no space left on the disk of TRM_DATA_DIR ({data_dir}) for data set {name}",
                {"disk": str(data_dir)},
            ) from None
        raise
    finally:
        await run_in_threadpool(shutil.rmtree, scratch, True)
    folder = datasets.folder_of(data_dir, name)
    view = await run_in_threadpool(show, folder, meta)
    return Pushed(dataset=meta, replaced=present, show=view)


def _check_room(request: Request, data_dir: Path, min_free: int) -> None:
    """507 when the upload, as declared, would leave less than TRM_MIN_FREE_BYTES on the disk
    of TRM_DATA_DIR (the runs and the database may share it)."""
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    data_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(data_dir).free
    if free - size < min_free:
        raise ApiError(
            507,
            "disk_full",
            f"the disk of TRM_DATA_DIR ({data_dir}) has {free} bytes free; this upload of "
            f"{size} bytes would leave less than TRM_MIN_FREE_BYTES ({min_free})",
            {"disk": str(data_dir), "free_bytes": free, "min_free_bytes": min_free},
        )


@router.get("/datasets", response_model=DatasetList, summary="List data sets")
def list_datasets(app: Annotated[AppState, Depends(state)]) -> DatasetList:
    """Every data set (name, sha256, files, sizes, created at and by) and the API's DATA_DIR."""
    data_dir = app.settings.data_dir
    return DatasetList(datasets=datasets.list_all(data_dir), data_dir=str(data_dir))


@router.get("/datasets/{name}", response_model=DatasetShow, summary="Show a data set")
def show_dataset(name: str, app: Annotated[AppState, Depends(state)]) -> DatasetShow:
    """What a dry corpus build would read from data set `name`: files, rows, families, worlds,
    malformed lines, the sources a spec can name; reading stops at a bound and says so."""
    data_dir = app.settings.data_dir
    meta = datasets.load(data_dir, name)
    return show(datasets.folder_of(data_dir, name), meta)


@router.delete("/datasets/{name}", response_model=DatasetMeta, summary="Delete a data set")
def delete_dataset(
    name: str,
    app: Annotated[AppState, Depends(state)],
    db: Annotated[Session, Depends(session)],
) -> DatasetMeta:
    """Delete data set `name`; a 409 while an unfinished run reads it."""
    data_dir = app.settings.data_dir
    meta = datasets.load(data_dir, name)
    readers = datasets.readers(db, data_dir, name)
    if readers:
        raise datasets.in_use(readers, name, "delete it")
    datasets.remove(data_dir, name)
    return meta
