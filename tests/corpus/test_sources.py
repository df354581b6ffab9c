"""Reading each source format: every line is kept, invalid under a reason, or a duplicate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.corpus_logs import (
    normalized,
    play_root,
    read_rows,
    router_row,
    spec_of,
    trace,
    write_jsonl,
)
from worker.corpus import CorpusInputError, build_corpus


def _source(manifest: dict, name: str) -> dict:
    return next(s for s in manifest["sources"] if s["name"] == name)


def test_every_broken_play_row_is_counted_under_its_reason_with_its_line(
    broken_play_root: Path, tmp_path: Path
) -> None:
    spec = spec_of({"type": "trm_play_root", "name": "play", "path": str(broken_play_root)})
    result = build_corpus(spec, tmp_path / "out")
    source = _source(result.manifest, "play")
    invalid = {reason: detail["count"] for reason, detail in source["invalid"].items()}
    assert invalid == {
        "bad_json": 1,
        "label_out_of_range": 2,
        "missing_label": 1,
        "missing_state": 1,
        "bad_label": 1,
        "not_object": 1,
    }
    where = source["invalid"]["label_out_of_range"]["first_lines"]
    assert where == [{"file": "worlds/grid-a/trm_traces.jsonl", "lines": [3, 7]}]
    assert source["invalid"]["bad_json"]["first_lines"][0]["lines"] == [2]
    # 10 non-blank lines in grid-a + 2 worlds x 2 episodes x 3 turns
    assert source["rows_read"] == 10 + 12
    assert source["duplicates"] == 1
    assert source["blank_lines"] == 1
    assert source["rows_kept"] == 2 + 12
    assert all(result.manifest["accounting"].values())


def test_pick_n_is_zero_based_unless_the_row_says_pick_base_1(tmp_path: Path) -> None:
    tools = ["left", "right", "stay"]
    rows = [
        trace(0, 0, 1, tools),
        trace(0, 1, 1, tools, pick_base=1),
        trace(0, 2, 3, tools, pick_base=1),
    ]
    write_jsonl(tmp_path / "play" / "worlds" / "w" / "trm_traces.jsonl", rows)
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(tmp_path / "play")})
    result = build_corpus(spec, tmp_path / "out", dry_run=False)
    exported = read_rows(result.files["train"]) + read_rows(result.files["val"])
    actions = {row["meta"]["turn"]: row["action"] for row in exported}
    assert actions == {0: "right", 1: "left", 2: "stay"}
    assert all(row["tools"] == tools for row in exported)


def test_play_state_holds_decision_fields_and_never_the_outcome(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"w": 1}, episodes=1)
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(root)}, min_exact_positives=1)
    result = build_corpus(spec, tmp_path / "out")
    [row] = read_rows(result.files["train"]) + read_rows(result.files["val"])
    assert row["state"] == (
        '{"encounter_id":"e0-0","latent_norm":1.5,"metrics":{"desirability":0.0},'
        '"state":{"goal":[3,3],"pos":[0,0]}}'
    )
    assert "next_encounter" not in row["state"] and row["meta"]["next_encounter"] == "e0-1"
    assert row["meta"]["world_id"] == "w" and row["meta"]["line"] == 1


def test_normalized_rows_with_an_action_outside_tools_are_invalid(tmp_path: Path) -> None:
    rows = [
        normalized({"x": 1}, ["a", "b"], "a", env="e1"),
        normalized({"x": 2}, ["a", "b"], "c", env="e1"),  # line 2 action_not_in_tools
        {"state": "", "tools": ["a"], "action": "a"},  # line 3 missing_state
        {"state": "{}", "tools": ["a"], "action": "a"},  # line 4 missing_state
        {"state": '{"x":3}', "tools": [], "action": "a"},  # line 5 missing_tools
        {"state": '{"x":4}', "tools": ["a", "a"], "action": "a"},  # line 6 duplicate_tools
        {"state": '{"x":5}', "tools": ["a"]},  # line 7 missing_action
        normalized({"x": 1}, ["a", "b"], "a", env="e1"),  # line 8 duplicate of line 1
    ]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    spec = spec_of({"type": "jsonl", "name": "n", "path": str(path)})
    result = build_corpus(spec, tmp_path / "out")
    source = _source(result.manifest, "n")
    assert {r: d["count"] for r, d in source["invalid"].items()} == {
        "action_not_in_tools": 1,
        "missing_state": 2,
        "missing_tools": 1,
        "duplicate_tools": 1,
        "missing_action": 1,
    }
    assert source["invalid"]["missing_state"]["first_lines"] == [
        {"file": "rows.jsonl", "lines": [3, 4]}
    ]
    assert (source["rows_kept"], source["duplicates"]) == (1, 1)


def test_reasoning_trace_maps_dotted_fields_and_applies_defaults(tmp_path: Path) -> None:
    rows = [
        {
            "obs": {"pos": 1, "hp": 9},
            "plan": {"options": ["wait", "go"], "choice": "go"},
            "w": "x1",
        },
        {"obs": {"pos": 2}, "plan": {}, "w": "x1"},  # tools and action from defaults
        {"obs": {"pos": 3}, "plan": {"options": ["wait"], "choice": "fly"}},  # not in tools
        {"other": 1},  # missing_state
    ]
    path = write_jsonl(tmp_path / "traces.jsonl", rows)
    spec = spec_of(
        {
            "type": "jsonl",
            "name": "t",
            "path": str(path),
            "mode": "reasoning_trace",
            "state_fields": ["obs.pos", "obs.hp"],
            "tools_field": "plan.options",
            "tools_default": ["wait", "go", "stop"],
            "action_field": "plan.choice",
            "action_default": "wait",
            "meta_fields": {"env": "w"},
        }
    )
    result = build_corpus(spec, tmp_path / "out", dry_run=True)
    source = _source(result.manifest, "t")
    assert {r: d["count"] for r, d in source["invalid"].items()} == {
        "action_not_in_tools": 1,
        "missing_state": 1,
    }
    assert source["rows_kept"] == 2
    assert result.files == {}
    assert not (tmp_path / "out").exists()


def test_reasoning_trace_rows_carry_mapped_state_and_meta(tmp_path: Path) -> None:
    rows = [{"obs": {"pos": 1, "hp": 9}, "plan": {"choice": "go"}, "w": "x1", "kind": "oracle"}]
    path = write_jsonl(tmp_path / "traces.jsonl", rows)
    spec = spec_of(
        {
            "type": "jsonl",
            "name": "t",
            "path": str(path),
            "mode": "reasoning_trace",
            "state_fields": ["obs.pos", "obs.hp"],
            "tools_default": ["wait", "go"],
            "action_field": "plan.choice",
            "meta_fields": {"env": "w"},
        },
        min_exact_positives=1,
    )
    result = build_corpus(spec, tmp_path / "out")
    [row] = read_rows(result.files["train"])
    assert row["state"] == '{"hp":9,"pos":1}'
    assert (row["tools"], row["action"]) == (["wait", "go"], "go")
    assert (row["meta"]["env"], row["meta"]["kind"]) == ("x1", "oracle")


def test_router_row_without_route_is_invalid_never_labelled(tmp_path: Path) -> None:
    rows = [
        router_row("what is 2+2", "math-expert"),
        router_row("summarize this", "writer"),
        router_row("translate hola", None),  # line 3 missing_route
        router_row("   ", "writer"),  # line 4 missing_state
        {"input": {"prompt_text": "x"}, "output": {"route": ""}},  # line 5 missing_route
    ]
    path = write_jsonl(tmp_path / "router.jsonl", rows)
    spec = spec_of({"type": "router_jsonl", "name": "r", "path": str(path)})
    result = build_corpus(spec, tmp_path / "out")
    source = _source(result.manifest, "r")
    assert source["invalid"]["missing_route"]["count"] == 2
    assert source["invalid"]["missing_route"]["first_lines"][0]["lines"] == [3, 5]
    assert source["invalid"]["missing_state"]["count"] == 1
    exported = read_rows(result.files["train"]) + read_rows(result.files["val"])
    assert sorted(row["action"] for row in exported) == ["math-expert", "writer"]
    assert all(row["tools"] == ["math-expert", "writer"] for row in exported)


def test_router_routes_listed_in_the_spec_make_other_routes_invalid(tmp_path: Path) -> None:
    rows = [router_row("a", "fast"), router_row("b", "slow"), router_row("c", "unknown")]
    path = write_jsonl(tmp_path / "router.jsonl", rows)
    spec = spec_of(
        {"type": "router_jsonl", "name": "r", "path": str(path), "routes": ["fast", "slow"]}
    )
    result = build_corpus(spec, tmp_path / "out", dry_run=True)
    assert _source(result.manifest, "r")["invalid"]["action_not_in_tools"]["count"] == 1


def test_a_missing_source_path_fails_naming_the_field_before_writing(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "ok.jsonl", [normalized({"x": 1}, ["a"], "a")])
    spec = spec_of(
        {"type": "jsonl", "name": "ok", "path": str(good)},
        {"type": "trm_play_root", "name": "gone", "path": "C:/projects/aicoo/play"},
    )
    with pytest.raises(CorpusInputError) as caught:
        build_corpus(spec, tmp_path / "out")
    assert caught.value.field == "sources[1].path"
    assert "C:/projects/aicoo/play" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_play_root_without_traces_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    spec = spec_of({"type": "trm_play_root", "name": "p", "path": str(tmp_path / "empty")})
    with pytest.raises(CorpusInputError, match=r"sources\[0\]\.path: .*worlds/\*/trm_traces"):
        build_corpus(spec, tmp_path / "out")


def test_duplicates_are_removed_across_sources_and_counted_where_they_repeat(
    tmp_path: Path,
) -> None:
    row = normalized({"x": 1}, ["a", "b"], "b")
    first = write_jsonl(tmp_path / "a.jsonl", [row])
    spaced = {"state": '{ "x" : 1 }', "tools": ["a", "b"], "action": "b"}
    second = write_jsonl(tmp_path / "b.jsonl", [row, normalized({"x": 2}, ["a", "b"], "a"), spaced])
    spec = spec_of(
        {"type": "jsonl", "name": "a", "path": str(first)},
        {"type": "jsonl", "name": "b", "path": str(second)},
    )
    result = build_corpus(spec, tmp_path / "out", dry_run=True)
    assert [s["duplicates"] for s in result.manifest["sources"]] == [0, 2]
    assert result.counters["duplicates"] == 2 and result.counters["rows_kept"] == 2
    spec_keep = spec.model_copy(update={"dedupe": False})
    assert build_corpus(spec_keep, tmp_path / "o2", dry_run=True).counters["rows_kept"] == 4
