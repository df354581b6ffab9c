"""Exported files: chat rows per contract, the corpus hash and its reuse, dry runs, clean writes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.corpus.corpus_logs import play_root, read_rows, router_row, spec_of, write_jsonl
from worker.corpus import build_corpus


def _router_spec(tmp_path: Path, contract: str):
    rows = [
        router_row(
            f"question {i}", "math" if i % 2 else "chat", family=f"fam{i % 3}", expert_id="e1"
        )
        for i in range(12)
    ]
    path = write_jsonl(tmp_path / "router.jsonl", rows)
    return spec_of(
        {"type": "router_jsonl", "name": "r", "path": str(path)},
        contract=contract,
        split={"val_fraction": 0.25},
    )


def test_action_only_messages_have_the_action_id_alone_as_the_answer(tmp_path: Path) -> None:
    result = build_corpus(_router_spec(tmp_path, "action_only"), tmp_path / "o")
    chats = read_rows(result.files["messages"])
    train = read_rows(result.files["train"])
    assert len(chats) == len(train) == result.counters["train"]
    for chat, row in zip(chats, train, strict=True):
        system, user, assistant = chat["messages"]
        assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant"]
        assert assistant["content"] == row["action"]
        assert row["state"] in user["content"]
        assert user["content"].endswith("- chat\n- math")
        assert chat["meta"]["line"] == row["meta"]["line"]
    assert len(read_rows(result.files["messages_val"])) == result.counters["val"] > 0


def test_json_contract_answers_with_the_router_object(tmp_path: Path) -> None:
    result = build_corpus(_router_spec(tmp_path, "json"), tmp_path / "o")
    chat = read_rows(result.files["messages"])[0]
    answer = json.loads(chat["messages"][2]["content"])
    assert answer["route"] in ("math", "chat")
    assert answer["expert_id"] == "e1" and answer["prompt_family"].startswith("fam")
    assert result.manifest["contract"] == "json"


def test_an_identical_corpus_is_recognised_and_reused(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 3, "grid-b": 3, "grid-c": 3})
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(root)})
    first = build_corpus(spec, tmp_path / "out")
    before = first.files["train"].stat().st_mtime_ns
    again = build_corpus(spec, tmp_path / "out")
    assert again.reused and not first.reused
    assert again.corpus_hash == first.corpus_hash
    assert again.files["train"].stat().st_mtime_ns == before

    # The hash is over the content: the same logs elsewhere give the same corpus.
    copy = play_root(tmp_path / "copy", {"grid-a": 3, "grid-b": 3, "grid-c": 3})
    moved = spec_of({"type": "trm_play_root", "name": "p", "path": str(copy)})
    assert build_corpus(moved, tmp_path / "o2", dry_run=True).corpus_hash == first.corpus_hash

    changed = spec.model_copy(update={"contract": "json"})
    assert build_corpus(changed, tmp_path / "out").corpus_hash != first.corpus_hash


def test_a_tampered_output_is_rebuilt_not_reused(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 3, "grid-b": 3, "grid-c": 3})
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(root)})
    first = build_corpus(spec, tmp_path / "out")
    original = first.files["train"].read_bytes()
    first.files["train"].write_text("")
    again = build_corpus(spec, tmp_path / "out")
    assert not again.reused and again.files["train"].read_bytes() == original


def test_dry_run_returns_the_manifest_and_writes_nothing(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 3, "grid-b": 3, "grid-c": 3})
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(root)})
    dry = build_corpus(spec, tmp_path / "out", dry_run=True)
    assert not (tmp_path / "out").exists()
    real = build_corpus(spec, tmp_path / "out")
    assert dry.corpus_hash == real.corpus_hash and dry.manifest["dry_run"] is True
    assert dry.counters == real.counters


def test_a_build_leaves_only_finished_files_and_a_manifest_that_matches(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 3, "grid-b": 3, "grid-c": 3})
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(root)})
    calls: list[tuple[int, int]] = []
    result = build_corpus(
        spec, tmp_path / "out", progress=lambda done, total: calls.append((done, total))
    )
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(
        [
            "manifest.json",
            "train.jsonl",
            "val.jsonl",
            "anchor.jsonl",
            "critic.jsonl",
            "messages.jsonl",
            "messages_val.jsonl",
        ]
    )
    manifest = json.loads(result.files["manifest"].read_text())
    assert manifest == result.manifest
    for name, entry in manifest["files"].items():
        assert len((tmp_path / "out" / name).read_text().splitlines()) == entry["rows"]
    total = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
    assert calls[-1] == (total, total)
