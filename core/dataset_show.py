"""What a dry corpus build would read from a data set (`GET /datasets/{name}`, `trm data show`):
the files each source kind would take (the same layouts worker/corpus/sources.py `discover`
reads), rows per file, malformed lines named by file and line, the families and worlds the rows
name, and a source ready to paste into a train spec.

The API process answers this itself, so its work is bounded: lines are counted by streaming (one
line of at most 16 MiB held at a time), and reading stops after `MAX_ROWS` lines or `MAX_BYTES`
bytes in all; the answer then says `complete: false` and which files were read only in part.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from core.datasets import META, DatasetMeta

MAX_ROWS, MAX_BYTES = 200_000, 256 << 20
MAX_LINE_BYTES = 16 << 20
MAX_FILES_WALKED, MAX_FILES_LISTED, MAX_MALFORMED, MAX_NAMES = 100_000, 200, 20, 50
PLAY = re.compile(r"^(?:(?P<root>.+)/)?worlds/(?P<world>[^/]+)/trm_traces\.jsonl$")
FAMILY_SPLIT = re.compile(r"[-_:/.]")  # worker/corpus/rows.py `env_family`'s rule
FAMILY_KEYS = ("family", "prompt_family", "intent")


class FileRows(BaseModel):
    path: str
    bytes: int
    rows: int  # JSON object lines read (blank lines are not rows)
    malformed: int
    read: Literal["all", "part", "none"]


class Malformed(BaseModel):
    file: str
    line: int
    reason: Literal["bad_json", "not_object", "line_too_long"]


class SuggestedSource(BaseModel):
    """A corpus source that reads (part of) the data set, ready for a train spec's
    `corpus.sources`; `path` is a folder inside the data set (absent: its top)."""

    type: Literal["trm_play_root", "jsonl", "router_jsonl"]
    name: str
    dataset: str
    path: str | None = None
    files: int


class DatasetShow(BaseModel):
    dataset: DatasetMeta
    files: list[FileRows]
    files_total: int
    rows: int
    sources: list[SuggestedSource]
    families: dict[str, int]
    worlds: dict[str, int]
    malformed: list[Malformed]
    malformed_total: int
    unread: list[str]  # files no source kind reads (not *.jsonl in a layout it takes)
    complete: bool
    note: str | None = None


def _walk(folder: Path) -> tuple[list[str], bool]:
    """Relative paths of the plain files inside `folder` (never following links), sorted."""
    found: list[str] = []
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for name in files:
            path = Path(top) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(folder).as_posix()
            if rel != META:
                found.append(rel)
            if len(found) >= MAX_FILES_WALKED:
                return sorted(found), False
    return sorted(found), True


def _layouts(files: list[str]) -> tuple[dict[str, list[str]], dict[str, list[str]], list[str]]:
    """(play roots -> their traces, jsonl folders -> their *.jsonl, files neither reads)."""
    play: dict[str, list[str]] = {}
    jsonl: dict[str, list[str]] = {}
    unread: list[str] = []
    for rel in files:
        match = PLAY.fullmatch(rel)
        if match:
            play.setdefault(match.group("root") or "", []).append(rel)
        elif rel.endswith(".jsonl"):
            jsonl.setdefault(rel.rpartition("/")[0], []).append(rel)
        else:
            unread.append(rel)
    return play, jsonl, unread


def _holders(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [obj] + [v for k in ("event", "meta", "output") if isinstance(v := obj.get(k), dict)]


def _world(obj: dict[str, Any], play_world: str | None) -> str | None:
    for holder in _holders(obj):
        for key in ("world_id", "env"):
            value = holder.get(key)
            if isinstance(value, str) and value:
                return value
    return play_world


def _family(obj: dict[str, Any], world: str | None) -> str | None:
    for key in FAMILY_KEYS:
        for holder in _holders(obj):
            value = holder.get(key)
            if isinstance(value, str) and value:
                return value
    return (FAMILY_SPLIT.split(world, maxsplit=1)[0] or world) if world else None


def _kind_of(obj: dict[str, Any]) -> Literal["jsonl", "router_jsonl"]:
    return "router_jsonl" if "input" in obj and isinstance(obj.get("output"), dict) else "jsonl"


class _Reader:
    def __init__(self) -> None:
        self.rows = self.bytes = self.malformed_total = 0
        self.malformed: list[Malformed] = []
        self.families: Counter[str] = Counter()
        self.worlds: Counter[str] = Counter()
        self.first: dict[str, dict[str, Any]] = {}  # folder -> its first object row

    def spent(self) -> bool:
        return self.rows >= MAX_ROWS or self.bytes >= MAX_BYTES

    def _bad(self, rel: str, line: int, reason: Any) -> None:
        self.malformed_total += 1
        if len(self.malformed) < MAX_MALFORMED:
            self.malformed.append(Malformed(file=rel, line=line, reason=reason))

    def read(self, folder: Path, rel: str, play_world: str | None) -> FileRows:
        path = folder / rel
        size = path.stat().st_size
        rows = bad = 0
        if self.spent():
            return FileRows(path=rel, bytes=size, rows=0, malformed=0, read="none")
        whole = True
        with path.open("rb") as fh:
            line = 0
            while raw := fh.readline(MAX_LINE_BYTES):
                line += 1
                self.bytes += len(raw)
                if not raw.strip():
                    continue
                rows += 1
                self.rows += 1
                if len(raw) >= MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    while piece := fh.readline(1 << 20):  # the rest of the line, dropped
                        self.bytes += len(piece)
                        if piece.endswith(b"\n"):
                            break
                    bad += 1
                    self._bad(rel, line, "line_too_long")
                else:
                    bad += self._row(rel, line, raw, play_world)
                if self.spent():
                    whole = fh.read(1) == b""
                    break
        read: Literal["all", "part"] = "all" if whole else "part"
        return FileRows(path=rel, bytes=size, rows=rows - bad, malformed=bad, read=read)

    def _row(self, rel: str, line: int, raw: bytes, play_world: str | None) -> int:
        try:
            obj = json.loads(raw)
        except ValueError:
            self._bad(rel, line, "bad_json")
            return 1
        if not isinstance(obj, dict):
            self._bad(rel, line, "not_object")
            return 1
        self.first.setdefault(rel.rpartition("/")[0], obj)
        world = _world(obj, play_world)
        if world:
            self.worlds[world] += 1
        family = _family(obj, world)
        if family:
            self.families[family] += 1
        return 0


def show(folder: Path, meta: DatasetMeta) -> DatasetShow:
    files, walked = _walk(folder)
    play, jsonl, unread = _layouts(files)
    reader = _Reader()
    listed: list[FileRows] = []
    for _root, traces in sorted(play.items()):
        for rel in traces:
            match = PLAY.fullmatch(rel)
            listed.append(reader.read(folder, rel, match.group("world") if match else None))
    for traces in jsonl.values():
        for rel in traces:
            listed.append(reader.read(folder, rel, None))
    sources = []
    for root, traces in sorted(play.items()):
        sources.append(_suggest("trm_play_root", meta.name, root, len(traces)))
    for where, traces in sorted(jsonl.items()):
        kind = _kind_of(reader.first.get(where, {}))
        sources.append(_suggest(kind, meta.name, where, len(traces)))
    complete = walked and all(f.read == "all" for f in listed)
    note = None
    if not complete:
        note = (
            f"read stopped after {reader.rows} lines / {reader.bytes} bytes (the show reads at "
            f"most {MAX_ROWS} lines or {MAX_BYTES} bytes): counts are lower bounds; files with "
            "read part or none were not read to the end"
        )
    elif not sources:
        note = (
            "no source kind reads these files: trm_play_root wants worlds/<world>/"
            "trm_traces.jsonl, jsonl and router_jsonl want *.jsonl files in a folder"
        )
    return DatasetShow(
        dataset=meta,
        files=listed[:MAX_FILES_LISTED],
        files_total=len(listed),
        rows=sum(f.rows for f in listed),
        sources=sources[:MAX_NAMES],
        families=dict(reader.families.most_common(MAX_NAMES)),
        worlds=dict(reader.worlds.most_common(MAX_NAMES)),
        malformed=reader.malformed,
        malformed_total=reader.malformed_total,
        unread=unread[:MAX_FILES_LISTED],
        complete=complete,
        note=note,
    )


def _suggest(kind: Any, dataset: str, where: str, files: int) -> SuggestedSource:
    name = f"{dataset}-{where.replace('/', '-')}" if where else dataset
    return SuggestedSource(type=kind, name=name, dataset=dataset, path=where or None, files=files)
