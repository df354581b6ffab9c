"""Unpacking a data set upload (`PUT /datasets/{name}`, core/datasets.py): what an archive may
hold is decided here, member by member, before a byte of it is written:
- plain files and folders only: a symlink, a hard link, a device, a fifo or a sparse file is
  refused, named;
- every path relative and inside the data set: no absolute path, no `..`, no backslash; each part
  `[A-Za-z0-9_][A-Za-z0-9._+=@,-]*`, at most 16 deep; hidden parts (`.DS_Store`, `._x`,
  `__MACOSX/`) are skipped and listed, never written (so nothing can plant the data set's own
  `.dataset.json`);
- at most `TRM_MAX_DATASET_FILES` members and `TRM_MAX_DATASET_UNPACKED_BYTES` bytes, counted
  from each member's declared size before it is read and again as its bytes are written, so a
  bomb (many members, or a few that inflate) stops at the limit; a zip's directory is counted
  entry by entry before zipfile parses it (its end record's count may lie);
- no more than what `TRM_MAX_DATASETS_BYTES` leaves beside the other data sets, counted the same
  way.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from core.errors import ApiError

PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+=@,-]{0,254}$")
MAX_DEPTH, MAX_MEMBER_PATH = 16, 1024
CHUNK = 1 << 20


def refuse(status: int, code: str, message: str, field_name: str) -> ApiError:
    return ApiError(status, code, message, [{"field": field_name, "message": message}])


Format = Literal["tar", "tar.gz", "zip", "jsonl"]


@dataclass
class Limits:
    max_files: int
    max_unpacked_bytes: int
    quota: int | None = None  # TRM_MAX_DATASETS_BYTES, for all data sets together
    used: int = 0  # what the other data sets hold of it


@dataclass
class Unpacked:
    files: int = 0
    unpacked_bytes: int = 0
    skipped: list[str] = field(default_factory=list)


def sniff(path: Path) -> Format | None:
    """The upload's format from its first bytes; None when it is none of ours."""
    with path.open("rb") as fh:
        head = fh.read(512)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{") or (not text and head):
        return "jsonl"
    return None


def member_path(name: str) -> str | None:
    """The safe relative path of an archive member ("" for the archive's own root folder), None
    for a hidden one (skipped); a 422 naming the member for anything that could leave the data
    set or is not a plain name."""
    shown = name[:200]
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        raise _unsafe(shown, "an absolute path or a backslash; members must be relative paths")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _unsafe(shown, "a '..' part, which would leave the data set's folder")
    if not parts:
        return ""
    if any(p.startswith(".") for p in parts) or parts[0] == "__MACOSX":
        return None
    if len(parts) > MAX_DEPTH or len(name) > MAX_MEMBER_PATH:
        raise _unsafe(shown, f"deeper than {MAX_DEPTH} folders or longer than {MAX_MEMBER_PATH}")
    bad = next((p for p in parts if not PART.fullmatch(p)), None)
    if bad is not None:
        raise _unsafe(
            shown,
            f"the part {bad[:80]!r} has a character outside letters, digits and ._+=@,- (or "
            "starts with one of .+=@,-)",
        )
    return "/".join(parts)


def _unsafe(name: str, why: str) -> ApiError:
    return refuse(422, "unsafe_member", f"archive member {name!r}: {why}", "body")


def _too_many(limit: int) -> ApiError:
    return refuse(
        413,
        "too_many_files",
        f"the archive holds more than {limit} members (TRM_MAX_DATASET_FILES); split it into "
        "several data sets or ask the operator to raise the limit",
        "body",
    )


def _too_large_unpacked(limit: int) -> ApiError:
    return refuse(
        413,
        "unpacked_too_large",
        f"the archive unpacks to more than {limit} bytes (TRM_MAX_DATASET_UNPACKED_BYTES)",
        "body",
    )


def over_quota(used: int, quota: int) -> ApiError:
    room = max(quota - used, 0)
    return ApiError(
        507,
        "quota_exceeded",
        f"data sets hold {used} bytes of TRM_MAX_DATASETS_BYTES ({quota}); this one unpacks to "
        f"more than the {room} left: delete one (`trm data rm NAME`) or ask the operator to "
        "raise the limit",
        {"used_bytes": used, "quota_bytes": quota},
    )


class _Writer:
    """Writes members into `tree`, counting them and their bytes against the limits."""

    def __init__(self, tree: Path, limits: Limits) -> None:
        self.tree, self.limits, self.out = tree, limits, Unpacked()
        self.members, self.declared = 0, 0

    def member(self, declared: int) -> None:
        self.members += 1
        if self.members > self.limits.max_files:
            raise _too_many(self.limits.max_files)
        self.declared += max(declared, 0)
        self._bound(self.declared)

    def folder(self, rel: str) -> None:
        if rel:
            self._place(rel).mkdir(exist_ok=True)

    def _place(self, rel: str) -> Path:
        target = self.tree.joinpath(*rel.split("/"))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise _unsafe(rel, "a folder of it is also a file in the archive") from None
        return target

    def file(self, rel: str, source: IO[bytes]) -> None:
        target = self._place(rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(target, flags, 0o644)
        except (FileExistsError, IsADirectoryError):
            raise _unsafe(rel, "it appears twice in the archive") from None
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(CHUNK):
                self.out.unpacked_bytes += len(chunk)
                self._bound(self.out.unpacked_bytes)
                out.write(chunk)
        self.out.files += 1

    def _bound(self, size: int) -> None:
        if size > self.limits.max_unpacked_bytes:
            raise _too_large_unpacked(self.limits.max_unpacked_bytes)
        quota = self.limits.quota
        if quota is not None and self.limits.used + size > quota:
            raise over_quota(self.limits.used, quota)


def _member_kind(kind: str) -> str:
    return f"a {kind}; a data set holds only plain files and folders"


def unpack_tar(body: Path, writer: _Writer) -> None:
    # `for member in tar` reads one header at a time: a member count over the limit stops here,
    # before the rest of the archive is looked at.
    with tarfile.open(body, mode="r:*") as tar:
        for member in tar:
            writer.member(member.size)
            rel = member_path(member.name)
            if member.issym() or member.islnk():
                raise _unsafe(member.name[:200], _member_kind("link"))
            if member.isdir():
                if rel:
                    writer.folder(rel)
                continue
            if not member.isreg() or member.issparse():
                raise _unsafe(member.name[:200], _member_kind("device, fifo or sparse file"))
            if rel is None:
                writer.out.skipped.append(member.name[:200])
                continue
            source = tar.extractfile(member)
            if source is not None:
                writer.file(rel, source)


def zip_entries(body: Path, limit: int) -> int:
    """How many members a zip's central directory holds, counted header by header in the bytes
    zipfile would parse (its end record's size and place, zip64 too), before zipfile reads them
    into memory: a directory of millions of entries is refused at `limit` + 1. 0 when there is
    no end record (zipfile then says what is wrong)."""
    size = body.stat().st_size
    with body.open("rb") as fh:
        fh.seek(max(0, size - 65_557))
        tail = fh.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return 0
        where = size - len(tail) + at
        cd_size = int.from_bytes(tail[at + 12 : at + 16], "little")
        locator = at - 20
        if locator >= 0 and tail[locator : locator + 4] == b"PK\x06\x07":
            fh.seek(int.from_bytes(tail[locator + 8 : locator + 16], "little"))
            record = fh.read(56)
            if record[:4] == b"PK\x06\x06":
                cd_size = int.from_bytes(record[40:48], "little")
                where -= 76  # zipfile counts from the zip64 record (56) and its locator (20)
        start, count = where - cd_size, 0
        if start < 0:
            return 0
        fh.seek(start)
        while fh.tell() < where and count <= limit:
            header = fh.read(46)
            if len(header) < 46 or header[:4] != b"PK\x01\x02":
                break
            count += 1
            names = sum(int.from_bytes(header[k : k + 2], "little") for k in (28, 30, 32))
            fh.seek(names, os.SEEK_CUR)
    return count


def unpack_zip(body: Path, writer: _Writer) -> None:
    if zip_entries(body, writer.limits.max_files) > writer.limits.max_files:
        raise _too_many(writer.limits.max_files)
    with zipfile.ZipFile(body) as archive:
        for info in archive.infolist():
            writer.member(info.file_size)
            rel = member_path(info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise _unsafe(info.filename[:200], _member_kind("link"))
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise _unsafe(info.filename[:200], _member_kind("device or fifo"))
            if info.flag_bits & 0x1:
                raise _unsafe(info.filename[:200], "encrypted; send it unencrypted")
            if info.is_dir():
                if rel:
                    writer.folder(rel)
                continue
            if rel is None:
                writer.out.skipped.append(info.filename[:200])
                continue
            with archive.open(info) as source:
                writer.file(rel, source)


def unpack(body: Path, fmt: Format, tree: Path, limits: Limits, filename: str) -> Unpacked:
    """Unpack the upload `body` into the new folder `tree`; a 422/413 names what is wrong."""
    tree.mkdir(parents=True)
    writer = _Writer(tree, limits)
    try:
        if fmt == "zip":
            unpack_zip(body, writer)
        elif fmt == "jsonl":
            writer.member(body.stat().st_size)
            with body.open("rb") as source:
                writer.file(filename, source)
        else:
            unpack_tar(body, writer)
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise refuse(
            422,
            "bad_archive",
            f"the {fmt} archive cannot be read: {str(exc)[:200] or type(exc).__name__}; send a "
            "whole .tar, .tar.gz or .zip, or a single .jsonl file",
            "body",
        ) from None
    if writer.out.files == 0:
        raise refuse(
            422,
            "empty_dataset",
            "the upload holds no files (hidden ones are skipped); send the folder of logs",
            "body",
        )
    return writer.out
