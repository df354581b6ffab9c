"""A data set upload packed on the client (`trm data push`, the MCP `datasets` tool): a folder
becomes a tar.gz of its contents; a .jsonl or an archive is sent as it is. What the server
refuses (a link) or skips (a hidden file) is left out here already, and named."""

from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

ARCHIVE_TYPES = {
    ".jsonl": "application/x-ndjson",
    ".tar": "application/x-tar",
    ".tar.gz": "application/gzip",
    ".tgz": "application/gzip",
    ".zip": "application/zip",
}


@dataclass
class Packed:
    """An upload ready to stream: the file, its sha256 and type, and what was left out."""

    file: Path
    sha256: str
    content_type: str
    filename: str | None = None  # a single .jsonl's name, kept in the data set
    left_out: list[str] = field(default_factory=list)


def pack(path: Path, scratch: Path) -> Packed:
    """A folder as a tar.gz of its contents (paths relative to it) written under `scratch`; a
    .jsonl, .tar, .tar.gz, .tgz or .zip file as it is. A folder's links and hidden files
    (`.git`, `.DS_Store`) are left out and named: the server would refuse a link."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_file():
        suffix = next((s for s in ARCHIVE_TYPES if path.name.endswith(s)), None)
        if suffix is None:
            raise ValueError(f"{path}: send a folder, or a .jsonl, .tar, .tar.gz or .zip file")
        name = path.name if suffix == ".jsonl" else None
        return Packed(path, _sha256(path), ARCHIVE_TYPES[suffix], name)
    archive = scratch / "upload.tar.gz"
    left_out: list[str] = []
    with tarfile.open(archive, "w:gz") as tar:
        for top, dirs, files in os.walk(path):
            dirs.sort()
            rel_top = Path(top).relative_to(path)
            for name in sorted(dirs + files):
                rel = (rel_top / name).as_posix()
                full = Path(top) / name
                if name.startswith(".") or full.is_symlink():
                    left_out.append(rel)
                    if name in dirs:
                        dirs.remove(name)
                elif full.is_file():
                    tar.add(full, arcname=rel, recursive=False)
    return Packed(archive, _sha256(archive), "application/gzip", None, left_out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
