"""A corpus file of 1 GB of garbage: counted invalid, in bounded memory (slow: minutes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.mark.soak
def test_a_1gb_garbage_corpus_is_counted_invalid_in_bounded_memory(tmp_path: Path) -> None:
    """1 GB of random bytes (few newlines, so some 'lines' are huge) through the corpus reader in
    a child process: every line counted invalid, peak RSS far below the file's size."""
    import subprocess
    import sys

    garbage = tmp_path / "garbage.jsonl"
    with open(garbage, "wb") as fh:
        for _ in range(1024):
            fh.write(os.urandom(1024 * 1024))
    script = (
        "import json, resource, sys\n"
        "from app.schemas.corpus import CorpusSpec\n"
        "from worker.corpus import build_corpus\n"
        "spec = CorpusSpec.model_validate({'sources': [{'type': 'jsonl', 'name': 'g', "
        "'path': sys.argv[1]}]})\n"
        "try:\n"
        "    build_corpus(spec, sys.argv[2])\n"
        "except Exception as exc:\n"
        "    print('ERROR', type(exc).__name__, str(exc)[:300])\n"
        "print('RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(garbage), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    rss_kb = int(done.stdout.split("RSS_KB")[-1].split()[0])
    assert rss_kb < 512 * 1024, f"peak RSS {rss_kb / 1024:.0f} MiB reading 1 GiB of garbage"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
