"""`trm corpus build` reads local files: a source naming a data set (which lives on the server)
is refused there with what to do instead, never read as the current folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_a_local_corpus_build_refuses_a_data_set_and_says_where_it_lives(tmp_path: Path) -> None:
    spec = tmp_path / "corpus.json"
    spec.write_text(json.dumps({"sources": [{"type": "jsonl", "name": "r", "dataset": "logs"}]}))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "corpus", "build", str(spec), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "sources[0].dataset: a data set is on the server" in done.stderr
    assert not out.exists()
