"""Fixtures for the corpus tests; the writers live in corpus_logs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.corpus.corpus_logs import play_root, trace, write_jsonl


@pytest.fixture
def broken_play_root(tmp_path: Path) -> Path:
    """Three worlds of good rows plus one of each defect, at known lines of world `grid-a`."""
    root = play_root(tmp_path / "play", {"grid-b": 3, "grid-c": 3})
    tools = ["n", "s", "e"]
    rows: list[Any] = [
        trace(0, 0, 0, tools),  # line 1 ok
        "{not json",  # line 2 bad_json
        trace(0, 1, 3, tools),  # line 3 label_out_of_range (0-based: 3 of 3)
        trace(0, 2, None, tools),  # line 4 missing_label
        {
            "episode": 0,
            "turn": 3,
            "label": "PICK 0",
            "event": {},
            "latent": {},
            "reasoning_interpret_log": {"candidate_scores": [{"opt_id": "n"}]},
        },  # 5 missing_state
        trace(0, 0, 0, tools),  # line 6 duplicate of line 1
        trace(1, 0, -1, tools),  # line 7 label_out_of_range (never clamped to 0)
        trace(1, 1, "MOVE 1", tools),  # line 8 bad_label
        trace(1, 2, 2, tools),  # line 9 ok
        "",  # line 10 blank
        "[1, 2]",  # line 11 not_object
    ]
    write_jsonl(root / "worlds" / "grid-a" / "trm_traces.jsonl", rows)
    return root
