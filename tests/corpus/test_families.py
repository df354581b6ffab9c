"""Family floor and negatives: what may not teach the action model goes to critic.jsonl."""

from __future__ import annotations

from pathlib import Path

from tests.corpus.corpus_logs import (
    normalized,
    play_root,
    read_rows,
    router_row,
    spec_of,
    trace,
    write_jsonl,
)
from worker.corpus import build_corpus


def test_a_family_with_one_positive_leaves_the_action_corpus_for_critic(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 3, "grid-b": 3, "maze-a": 3})
    write_jsonl(
        root / "worlds" / "lone-a" / "trm_traces.jsonl",
        [trace(0, 0, 1, ["x", "y"]), trace(0, 1, 0, ["x", "y"], kind="suboptimal")],
    )
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(root)})
    result = build_corpus(spec, tmp_path / "out")
    families = result.manifest["families"]
    assert families["below_floor"] == {"lone": 1}
    assert families["counts"]["lone"] == {"positives": 1, "negatives": 1}
    exported = read_rows(result.files["train"]) + read_rows(result.files["val"])
    assert "lone" not in {row["meta"]["family"] for row in exported}
    critic = read_rows(result.files["critic"])
    reasons = sorted((row["meta"]["family"], row["meta"]["critic_reason"]) for row in critic)
    assert reasons == [("lone", "below_floor"), ("lone", "negative")]
    assert any("'lone' has 1 positive" in w for w in result.manifest["warnings"])


def test_raising_the_floor_drops_thin_families_and_zero_keeps_all(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 2, "maze-a": 5, "swim-a": 5}, episodes=1)
    source = {"type": "trm_play_root", "name": "p", "path": str(root)}
    strict = build_corpus(spec_of(source, min_exact_positives=3), tmp_path / "a", dry_run=True)
    assert strict.manifest["families"]["below_floor"] == {"grid": 2}
    loose = build_corpus(spec_of(source, min_exact_positives=0), tmp_path / "b", dry_run=True)
    assert loose.manifest["families"]["below_floor"] == {}
    assert loose.counters["critic"] == 0
    assert strict.counters["critic"] == 2


def test_rows_labelled_negative_go_to_critic_never_to_train(tmp_path: Path) -> None:
    tools = ["a", "b", "c"]
    rows = []
    for ep in range(6):
        rows.append(trace(ep, 0, 0, tools, kind="oracle"))
        rows.append(trace(ep, 1, 1, tools, kind="suboptimal"))
        rows.append(trace(ep, 2, 2, tools, kind="invalid"))
        rows.append(trace(ep, 3, 0, tools, kind="recovery"))
    outcome_negative = trace(9, 0, 1, tools)
    outcome_negative["event"]["outcome"] = "dead_end"
    rows.append(outcome_negative)
    write_jsonl(tmp_path / "play" / "worlds" / "grid-a" / "trm_traces.jsonl", rows)
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(tmp_path / "play")})
    result = build_corpus(spec, tmp_path / "out")
    action_rows = read_rows(result.files["train"]) + read_rows(result.files["val"])
    assert {row["meta"].get("kind") for row in action_rows} == {"oracle", "recovery"}
    critic = read_rows(result.files["critic"])
    assert len(critic) == 13
    assert {row["meta"]["critic_reason"] for row in critic} == {"negative"}
    assert result.manifest["sources"][0]["kinds"] == {
        "invalid": 6,
        "oracle": 6,
        "recovery": 6,
        "suboptimal": 6,
    }
    assert result.manifest["splits"]["critic"]["negative"] == 13


def test_negatives_in_normalized_and_router_rows_are_read_from_kind_fields(tmp_path: Path) -> None:
    rows = [normalized({"i": i}, ["a", "b"], "a", env="e") for i in range(3)]
    rows.append(normalized({"i": 9}, ["a", "b"], "b", env="e", kind="negative"))
    path = write_jsonl(tmp_path / "n.jsonl", rows)
    router = [router_row(f"q{i}", "fast") for i in range(3)]
    router.append({**router_row("bad", "slow"), "label_kind": "wrong"})
    rpath = write_jsonl(tmp_path / "r.jsonl", router)
    spec = spec_of(
        {"type": "jsonl", "name": "n", "path": str(path)},
        {"type": "router_jsonl", "name": "r", "path": str(rpath)},
    )
    result = build_corpus(spec, tmp_path / "out")
    critic = read_rows(result.files["critic"])
    assert sorted(row["meta"]["kind"] for row in critic) == ["negative", "wrong"]
    assert result.counters["train"] + result.counters["val"] == 6
