"""Data sets: folders of logs a client hands the service (`PUT /datasets/{name}`, `trm data push`),
kept at `DATA_DIR/datasets/<name>/`. A corpus source names one as `{"dataset": "<name>"}` (the
API resolves it to that folder at submit: `resolve_datasets`), so every source reads a data set
as it reads any folder under DATA_DIR, on every host that sees DATA_DIR: nothing changes for
workers.

An upload arrives as a tar, a tar.gz, a zip or a single JSONL file, told apart by its first bytes.
It is unpacked into a temporary folder under `DATA_DIR/datasets/.incoming/` and renamed into place
in one step: a reader never sees half a data set, and an upload that fails leaves nothing.

What an archive may hold, and how it is unpacked: core/dataset_unpack.py.
"""

from __future__ import annotations

import re
import shutil
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel
from sqlmodel import Session, col, select

from core.dataset_unpack import Unpacked, over_quota, refuse
from core.errors import ApiError
from core.models import Run, utcnow
from core.paths import confined, corpus_sources, spec_path_fields
from core.schemas.sources import DATASET_NAME

NAME = re.compile(DATASET_NAME)
FOLDER = "datasets"
META = ".dataset.json"
INCOMING = ".incoming"
INSTALL_LOCK = ".install.lock"  # installs take turns: the quota is counted by one at a time
UPLOAD_ROUTE = "PUT /datasets/{name}"
PUSH_VERB = "trm data push DIR --name NAME"
# Runs that may still read their data: a data set they read is not deleted or replaced under them.
ACTIVE_STATUSES = ("queued", "running", "interrupted")


class DatasetMeta(BaseModel):
    """What `GET /datasets` lists; stored as the data set's `.dataset.json`."""

    name: str
    sha256: str
    bytes: int  # the upload as sent
    format: str
    files: int
    unpacked_bytes: int
    skipped: list[str]  # hidden members left out, by their name in the archive
    created_at: datetime
    created_by: str


def _invalid(field_name: str, message: str) -> ApiError:
    details = [{"field": field_name, "message": message}]
    return ApiError(422, "validation_error", f"{field_name}: {message}", details)


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise refuse(
            422,
            "validation_error",
            f"path.name: {name[:80]!r} is not a data set name: 1-64 characters, lower-case "
            "letters, digits, '.', '_' and '-', starting with a letter or digit",
            "path.name",
        )
    return name


def root_of(data_dir: Path) -> Path:
    return data_dir / FOLDER


def folder_of(data_dir: Path, name: str) -> Path:
    return root_of(data_dir) / check_name(name)


def names(data_dir: Path) -> list[str]:
    """The data sets there are: folders of DATA_DIR/datasets/ holding their `.dataset.json`."""
    top = root_of(data_dir)
    if not top.is_dir():
        return []
    return sorted(p.name for p in top.iterdir() if NAME.fullmatch(p.name) and (p / META).is_file())


def load(data_dir: Path, name: str) -> DatasetMeta:
    path = folder_of(data_dir, name) / META
    try:
        return DatasetMeta.model_validate_json(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        raise not_found(data_dir, name) from None


def resolve_datasets(spec: dict[str, Any], data_dir: Path) -> None:
    """A source naming `dataset` reads inside DATA_DIR/datasets/<name>/: its `path` becomes that
    folder (or the path given, inside it), resolved, and `dataset` leaves the stored spec, which
    names what the worker reads. An unknown name: a 422 listing the known ones."""
    for where, source in corpus_sources(spec):
        if "dataset" not in source:
            continue
        name = source.pop("dataset")
        if name is None:
            continue
        known = names(data_dir)
        if name not in known:
            raise _invalid(
                f"{where}.dataset",
                f"no data set {name!r}; known: {', '.join(known) or 'none'} (trm data list); "
                f"push one with `trm data push DIR --name {name}` (PUT /datasets/{name})",
            )
        inner = source.get("path") or "."
        folder = folder_of(data_dir, name)
        path = None if Path(inner).is_absolute() else confined(inner, folder)
        if path is None:
            raise _invalid(
                f"{where}.path",
                f"{inner!r}: beside dataset, path is a file or folder inside the data set, "
                "relative to its top (no absolute path, no '..')",
            )
        source["path"] = str(path)


def not_found(data_dir: Path, name: str) -> ApiError:
    known = names(data_dir)
    return ApiError(
        404,
        "not_found",
        f"no data set {name!r}; known: {', '.join(known) or 'none'} (GET /datasets, trm data "
        f"list); push one with {PUSH_VERB}",
        {"name": name, "known": known},
    )


def list_all(data_dir: Path) -> list[DatasetMeta]:
    out = []
    for name in names(data_dir):
        try:
            out.append(load(data_dir, name))
        except (ApiError, ValueError):  # removed meanwhile, or a hand-edited meta
            continue
    return out


def used_bytes(data_dir: Path, but: str | None = None) -> int:
    """What the data sets hold unpacked, leaving out `but` (the one an upload replaces)."""
    return sum(meta.unpacked_bytes for meta in list_all(data_dir) if meta.name != but)


def incoming(data_dir: Path) -> Path:
    """A fresh scratch folder for one upload, on the data set's own file system (for the rename)."""
    path = root_of(data_dir) / INCOMING / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path


def install(
    tree: Path, meta: DatasetMeta, data_dir: Path, scratch: Path, replace: bool, quota: int
) -> None:
    """Write the meta into `tree` and rename it to the data set's folder in one step. With
    `replace`, an older data set of the name is moved aside first (into `scratch`, removed with
    it): readers see the old folder or the new one, never a mix. Installs take turns, each
    counting the data sets again: uploads side by side cannot pass the quota together."""
    with FileLock(str(root_of(data_dir) / INSTALL_LOCK)):
        used = used_bytes(data_dir, but=meta.name if replace else None)
        if used + meta.unpacked_bytes > quota:
            raise over_quota(used, quota)
        _swap_in(tree, meta, data_dir, scratch, replace)


def _swap_in(tree: Path, meta: DatasetMeta, data_dir: Path, scratch: Path, replace: bool) -> None:
    (tree / META).write_text(meta.model_dump_json(indent=2))
    target = folder_of(data_dir, meta.name)
    if replace and target.exists():
        target.rename(scratch / "replaced")
    try:
        tree.rename(target)
    except OSError:  # another upload of the name won the race
        raise exists(meta.name) from None


def exists(name: str) -> ApiError:
    return ApiError(
        409,
        "conflict",
        f"data set {name!r} exists; delete it first (trm data rm {name}, DELETE /datasets/{name}) "
        "or push again with replace (trm data push --replace, ?replace=true)",
        {"name": name},
    )


def remove(data_dir: Path, name: str) -> None:
    """Rename the folder aside, then delete it: it is gone for readers at once."""
    target = folder_of(data_dir, name)
    if not (target / META).is_file():
        raise not_found(data_dir, name)
    scratch = incoming(data_dir)
    try:
        target.rename(scratch / "removed")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def readers(db: Session, data_dir: Path, name: str) -> list[str]:
    """The ids of unfinished runs whose spec reads the data set (a path inside its folder)."""
    folder = folder_of(data_dir, name).resolve()
    rows = db.exec(select(Run.id, Run.spec).where(col(Run.status).in_(ACTIVE_STATUSES))).all()
    found = []
    for run_id, spec in rows:
        if not isinstance(spec, dict):
            continue
        for _field, container, key in spec_path_fields(spec):
            value = container[key]
            inside = isinstance(value, str) and Path(value).is_absolute()
            if inside and Path(value).resolve().is_relative_to(folder):
                found.append(run_id)
                break
    return found


def in_use(run_ids: list[str], name: str, doing: str) -> ApiError:
    shown = ", ".join(run_ids[:10]) + (" ..." if len(run_ids) > 10 else "")
    return ApiError(
        409,
        "dataset_in_use",
        f"data set {name!r} is read by unfinished run(s) {shown}; {doing} once they end (or "
        "cancel them: trm cancel RUN)",
        {"name": name, "runs": run_ids},
    )


def new_meta(
    name: str, sha256: str, size: int, fmt: str, unpacked: Unpacked, who: str
) -> DatasetMeta:
    return DatasetMeta(
        name=name,
        sha256=sha256,
        bytes=size,
        format=fmt,
        files=unpacked.files,
        unpacked_bytes=unpacked.unpacked_bytes,
        skipped=unpacked.skipped[:100],
        created_at=utcnow(),
        created_by=who,
    )
