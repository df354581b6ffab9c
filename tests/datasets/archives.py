"""Archives as clients build them, hostile ones included, and the upload call the tests share."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from core.settings import Settings


def tar_of(folder: Path, gz: bool = True) -> bytes:
    """`folder`'s contents as a tar(.gz), paths relative to it (what `trm data push` sends)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buffer.getvalue()


def tar_with(members: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


ROW = b'{"state": "s", "tools": ["a", "b"], "action": "a"}\n'


def member(name: str, data: bytes = ROW, **fields: Any) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, (data if info.isreg() else None)


def zip_with(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def push(
    http: httpx.Client, name: str, body: bytes, digest: str | None = None, **params: Any
) -> httpx.Response:
    headers = {"X-Content-SHA256": digest or sha(body), "Content-Type": "application/gzip"}
    return http.put(f"/datasets/{name}", content=body, headers=headers, params=params)


def left_behind(settings: Settings, name: str) -> list[str]:
    """What an upload of `name` left under DATA_DIR/datasets: its folder, scratch files."""
    top = settings.data_dir / "datasets"
    found = [name] if (top / name).exists() else []
    incoming = top / ".incoming"
    if incoming.exists():
        found += [p.relative_to(top).as_posix() for p in incoming.rglob("*")]
    return found
