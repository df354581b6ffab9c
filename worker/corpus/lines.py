"""A log file read line by line as JSON objects, every line accounted for in the source's
`Tally` (`line_too_long`, `bad_json`, `not_object`, blank lines), never holding more than one
line of at most MAX_LINE_BYTES in memory: a file of garbage with no newline costs no more than a
good one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from worker.corpus.rows import Tally

MAX_LINE_BYTES = 16 << 20  # no row is near this; a longer "line" is garbage
_SKIP_PIECE = 1 << 20


def json_lines(
    root: Path, files: list[Path], tally: Tally, progress: Callable[[int], None]
) -> Iterator[tuple[Path, str, int, dict[str, Any]]]:
    """(file, file label, line number, parsed object) for every JSON object line."""
    for path in files:
        label = path.relative_to(root).as_posix() if root.is_dir() else path.name
        tally.files.append(label)
        with path.open("rb") as handle:
            for lineno, (raw, size) in enumerate(raw_lines(handle), 1):
                progress(size)
                if raw is None:
                    tally.rows_read += 1
                    tally.reject("line_too_long", label, lineno)
                    continue
                if not raw.strip():
                    tally.blank_lines += 1
                    continue
                tally.rows_read += 1
                try:
                    obj = json.loads(raw)
                except ValueError:
                    tally.reject("bad_json", label, lineno)
                    continue
                if not isinstance(obj, dict):
                    tally.reject("not_object", label, lineno)
                    continue
                yield path, label, lineno, obj


def raw_lines(handle: BinaryIO) -> Iterator[tuple[bytes | None, int]]:
    """(line, its size in bytes) for each line; (None, size) for one longer than MAX_LINE_BYTES,
    whose rest is read and dropped a piece at a time."""
    while raw := handle.readline(MAX_LINE_BYTES):
        if len(raw) < MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        size = len(raw)
        del raw
        while piece := handle.readline(_SKIP_PIECE):
            size += len(piece)
            if piece.endswith(b"\n"):
                break
        yield None, size
