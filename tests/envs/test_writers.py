"""Play logs: byte-identical for the same arguments, every row labelled as the corpus expects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.envs import generate
from worker.envs.route import ROUTES
from worker.envs.writers import REASONING_TRACE_SOURCE

ALL = ["route", "grid", "rebalance", "schedule", "verify"]
FORMATS = ["trm_play_root", "router_jsonl", "reasoning_trace"]
REPO = Path(__file__).resolve().parents[2]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("logs")
    generate(out, families=ALL, worlds=3, episodes=20, seed=4, noise=0.3, formats=FORMATS)
    return out


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_same_arguments_give_byte_identical_files_across_processes(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from worker.envs import generate; "
        f"generate(Path(sys.argv[1]), families={ALL!r}, worlds=2, episodes=6, seed=9, "
        f"noise=0.3, formats={FORMATS!r})"
    )
    for name, hashseed in (("a", "1"), ("b", "2")):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / name)], check=True, cwd=REPO, env=env
        )
    first, second = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert len(first) == 2 * 2 * len(ALL) + 3  # world.json + traces per world, 2 files, manifest
    assert first == second
    generate(
        tmp_path / "c", families=ALL, worlds=2, episodes=6, seed=10, noise=0.3, formats=FORMATS
    )
    assert snapshot(tmp_path / "c") != first


def test_play_root_rows_follow_the_corpus_conventions(logs: Path) -> None:
    files = sorted(logs.glob("worlds/*/trm_traces.jsonl"))
    assert len(files) == 3 * len(ALL)
    kinds: set[str] = set()
    for path in files:
        rows = read_jsonl(path)
        assert {r["world_id"] for r in rows} == {path.parent.name}
        for prev, row in zip([None, *rows], rows, strict=False):
            scores = row["reasoning_interpret_log"]["candidate_scores"]
            event = row["event"]
            n = int(row["label"].removeprefix("PICK "))
            picked = scores[n]
            kind = event["kind"]
            kinds.add(kind)
            assert row["family"] == row["world_id"].split("-")[0]
            assert list(event["action_tags"]) == [c["opt_id"] for c in scores]
            if kind in ("oracle", "recovery"):
                assert n == event["oracle_pick"] and picked["score"] == 1.0
                assert not picked["invalid"] and not picked["dead_end"]
                assert event["outcome"] in ("ok", "success")
            elif kind == "invalid":
                assert picked["invalid"] and event["outcome"] == "invalid"
                assert event["invalid_reason"]
            else:
                assert kind == "suboptimal" and not picked["invalid"] and picked["score"] < 1.0
                assert (event["outcome"] == "dead_end") == picked["dead_end"]
            if kind == "recovery":  # right after a bad step of the same episode
                assert prev["episode"] == row["episode"] and prev["turn"] == row["turn"] - 1
                assert prev["event"]["kind"] in ("invalid", "suboptimal")
            if event["next_encounter"] is None:
                assert event["outcome"] in ("success", "dead_end")
    assert kinds == {"oracle", "suboptimal", "invalid", "recovery"}


def test_noise_zero_is_pure_oracle_play_that_always_wins(tmp_path: Path) -> None:
    result = generate(tmp_path, families=ALL, worlds=2, episodes=10, seed=1, noise=0.0)
    assert all(w["kinds"] == {"oracle": w["rows"]} for w in result.manifest["per_world"])
    for path in tmp_path.glob("worlds/*/trm_traces.jsonl"):
        ends = [
            r["event"]["outcome"] for r in read_jsonl(path) if r["event"]["next_encounter"] is None
        ]
        assert ends == ["success"] * 10


def test_router_rows_carry_the_router_fields_for_each_route_decision(logs: Path) -> None:
    rows = read_jsonl(logs / "router.jsonl")
    play = sum(len(read_jsonl(p)) for p in logs.glob("worlds/route-*/trm_traces.jsonl"))
    assert len(rows) == play
    for row in rows:
        assert row["input"]["prompt_text"]
        out = row["output"]
        assert set(out) == {
            "route",
            "intent",
            "adapter_id",
            "expert_id",
            "prompt_family",
            "tool_caps",
            "rationale",
        }
        assert out["route"] in ROUTES and out["intent"] in out["prompt_family"]
        assert row["meta"]["kind"] in ("oracle", "suboptimal", "invalid", "recovery")
    oracle = [r for r in rows if r["meta"]["kind"] == "oracle"]
    assert len({r["output"]["route"] for r in oracle}) >= 3  # the task is not one constant route


def dig(obj, dotted: str):
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def test_reasoning_traces_resolve_through_the_documented_source_entry(logs: Path) -> None:
    rows = read_jsonl(logs / REASONING_TRACE_SOURCE["path"])
    assert {r["meta"]["family"] for r in rows} == set(ALL)
    for row in rows:
        for field in REASONING_TRACE_SOURCE["state_fields"] + REASONING_TRACE_SOURCE["meta_fields"]:
            dig(row, field)
        tools = dig(row, REASONING_TRACE_SOURCE["tools_field"])
        assert dig(row, REASONING_TRACE_SOURCE["action_field"]) in tools


def test_manifest_lists_every_file_with_rows_and_ready_sources(logs: Path) -> None:
    manifest = json.loads((logs / "envs_manifest.json").read_text())
    for entry in manifest["files"]:
        assert len(read_jsonl(logs / entry["path"])) == entry["rows"]
    assert [s["type"] for s in manifest["sources"]] == ["trm_play_root", "router_jsonl", "jsonl"]
    assert len(manifest["world_ids"]) == 3 * len(ALL)


def test_generate_refuses_to_mix_with_earlier_data_unless_asked(tmp_path: Path) -> None:
    generate(tmp_path, families=["grid"], worlds=2, episodes=2, seed=0)
    with pytest.raises(FileExistsError):
        generate(tmp_path, families=["grid"], worlds=1, episodes=2, seed=0)
    generate(tmp_path, families=["grid"], worlds=1, episodes=2, seed=0, replace=True)
    assert [p.name for p in (tmp_path / "worlds").iterdir()] == ["grid-s0-w0"]
