"""A `reasoning_trace` row whose every state field is empty carries no decision-relevant state:
the corpus builder counts it `missing_state` and never trains on it."""

from __future__ import annotations

from pathlib import Path

from tests.corpus.corpus_logs import read_rows, spec_of, write_jsonl
from worker.corpus import build_corpus


def test_rows_with_only_empty_state_fields_are_missing_state_never_kept(tmp_path: Path) -> None:
    rows = [
        {"question": "", "context": {"env": ""}, "tools": ["a", "b"], "pick": "a"},  # line 1
        {"question": "   ", "context": {"env": "\t"}, "tools": ["a", "b"], "pick": "b"},  # line 2
        {"question": None, "context": {"env": []}, "tools": ["a", "b"], "pick": "a"},  # line 3
        {"question": "which?", "context": {"env": ""}, "tools": ["a", "b"], "pick": "b"},
        {"question": "", "context": {"env": "w1"}, "tools": ["a", "b"], "pick": "a"},
    ]
    path = write_jsonl(tmp_path / "traces.jsonl", rows)
    spec = spec_of(
        {
            "type": "jsonl",
            "name": "t",
            "path": str(path),
            "mode": "reasoning_trace",
            "state_fields": ["question", "context.env"],
            "tools_field": "tools",
            "action_field": "pick",
        },
        min_exact_positives=1,
    )
    result = build_corpus(spec, tmp_path / "out")
    source = next(s for s in result.manifest["sources"] if s["name"] == "t")
    invalid = source["invalid"]
    assert {r: d["count"] for r, d in invalid.items()} == {"missing_state": 3}
    assert invalid["missing_state"]["first_lines"][0]["lines"] == [1, 2, 3]
    assert source["rows_kept"] == 2
    kept = [
        r
        for name in ("train", "val")
        if name in result.files
        for r in read_rows(result.files[name])
    ]
    assert sorted(r["state"] for r in kept) == sorted(
        ['{"env":"","question":"which?"}', '{"env":"w1","question":""}']
    )
