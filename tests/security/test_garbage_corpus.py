"""A corpus file of garbage: every line is counted (invalid, or blank), none silently dropped, and
the build's memory stays bounded however long a "line" is. 100 MiB in CI (slow: seconds), 1 GiB
as a soak case (minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from worker.corpus.lines import MAX_LINE_BYTES

MIB = 1 << 20
# The build runs in a child process so that its memory is its own: VmRSS when it starts (after
# the imports) and VmHWM, the peak, after it. (Not ru_maxrss: after fork it starts from the
# parent's RSS, here pytest's.) The peak is reset first where the kernel allows it.
BUILD = """
import contextlib, gc, json, re, sys
from pathlib import Path
from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
def kb(key):
    return int(re.search(key + r":\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1))
spec = CorpusSpec.model_validate({"sources": [{"type": "jsonl", "name": "g", "path": sys.argv[1]}]})
gc.collect()
with contextlib.suppress(OSError):
    Path("/proc/self/clear_refs").write_text("5")
before = kb("VmRSS")
manifest = build_corpus(spec, Path(sys.argv[2])).manifest
peak = kb("VmHWM")
keep = ("sources", "totals", "invalid", "accounting", "warnings")
print(json.dumps({"before_kb": before, "peak_kb": peak, **{k: manifest[k] for k in keep}}))
"""


def _random(fh: BinaryIO, size: int, newlines: bool = True) -> int:
    """`size` random bytes (a newline about every 256 bytes, or none); the newlines written."""
    count = 0
    while size > 0:
        block = os.urandom(min(size, 4 * MIB))
        if not newlines:
            block = block.replace(b"\n", b"x")
        count += block.count(b"\n")
        fh.write(block)
        size -= len(block)
    return count


def write_garbage(path: Path, size: int, giant: int) -> int:
    """Random bytes: short garbage lines around one newline-free `giant`-byte line in the middle.
    Returns the giant line's number."""
    with open(path, "wb") as fh:
        before = _random(fh, (size - giant) // 2)
        fh.write(b"\n")  # ends the line the random bytes left open: `before + 1` lines so far
        _random(fh, giant, newlines=False)
        fh.write(b"\n")
        _random(fh, size - giant - (size - giant) // 2 - 2)
    return before + 2


def count_lines(path: Path) -> tuple[int, int]:
    """(lines, blank lines) as the reader defines them, counted independently, in 1 MiB blocks."""
    lines = blank = 0
    only_space, open_line = True, False
    with open(path, "rb") as fh:
        while block := fh.read(MIB):
            parts = block.split(b"\n")
            for i, part in enumerate(parts):
                if part:
                    open_line = True
                    only_space = only_space and not part.strip()
                if i < len(parts) - 1:
                    lines += 1
                    blank += only_space
                    only_space, open_line = True, False
    if open_line:
        lines += 1
        blank += only_space
    return lines, blank


def build_in_child(garbage: Path, out: Path, timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(garbage), str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def check(tmp_path: Path, size: int, giant: int, timeout: float) -> None:
    garbage = tmp_path / "garbage.jsonl"
    giant_line = write_garbage(garbage, size, giant)
    lines, blank = count_lines(garbage)
    result = build_in_child(garbage, tmp_path / "out", timeout)
    garbage.unlink()

    source = result["sources"][0]
    assert source["rows_kept"] == 0
    assert source["rows_read"] + source["blank_lines"] == lines  # every line accounted for
    assert source["blank_lines"] == blank
    assert source["rows_invalid"] == source["rows_read"]  # every non-blank line is invalid
    assert sum(r["count"] for r in source["invalid"].values()) == source["rows_read"]
    assert source["invalid"]["line_too_long"] == {
        "count": 1,
        "first_lines": [{"file": "garbage.jsonl", "lines": [giant_line]}],
    }
    assert source["invalid"]["bad_json"]["count"] > lines // 2
    assert all(result["accounting"].values()), result["accounting"]
    assert any("kept no rows" in w for w in result["warnings"]), result["warnings"]

    # Bounded: the build holds at most one line of MAX_LINE_BYTES, whatever the file's size.
    grown_mib = (result["peak_kb"] - result["before_kb"]) / 1024
    print(
        f"{size // MIB} MiB of garbage, {lines} lines ({blank} blank): peak RSS "
        f"{result['peak_kb'] // 1024} MiB, {grown_mib:.0f} MiB above the build's start"
    )
    assert grown_mib < 3 * MAX_LINE_BYTES / MIB + 16, (
        f"the build grew by {grown_mib:.0f} MiB reading {size // MIB} MiB of garbage "
        f"with a {giant // MIB} MiB line"
    )
    assert result["peak_kb"] < 400 * 1024, f"peak RSS {result['peak_kb'] // 1024} MiB"


@pytest.mark.slow
def test_100mb_of_garbage_is_counted_invalid_in_bounded_memory(tmp_path: Path) -> None:
    check(tmp_path, 100 * MIB, giant=64 * MIB, timeout=300)


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_1gb_of_garbage_is_counted_invalid_in_bounded_memory(tmp_path: Path) -> None:
    check(tmp_path, 1024 * MIB, giant=256 * MIB, timeout=1800)
