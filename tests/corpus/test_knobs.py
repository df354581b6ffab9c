"""The six knobs: each changes the corpus as its name says, deterministically, and is recorded."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.corpus.corpus_logs import normalized, play_root, read_rows, spec_of, trace, write_jsonl
from worker.corpus import build_corpus
from worker.envs import generate
from worker.envs.families import FAMILIES

WORLDS = {f"{fam}-w{i}": 5 for fam in ("grid", "maze") for i in range(4)}


def _two_sources(tmp_path: Path, **fields) -> dict:
    a = write_jsonl(
        tmp_path / "a.jsonl",
        [normalized({"i": i}, ["x", "y"], "x", env="ea", episode=i) for i in range(100)],
    )
    b = write_jsonl(
        tmp_path / "b.jsonl",
        [normalized({"j": i}, ["x", "y"], "y", env="eb", episode=i) for i in range(100)],
    )
    return {
        "sources": [
            {"type": "jsonl", "name": "a", "path": str(a)},
            {"type": "jsonl", "name": "b", "path": str(b)},
        ],
        "split": {"by": "episode", "val_fraction": 0.1},
        **fields,
    }


def test_source_mix_sets_each_source_share_of_train(tmp_path: Path) -> None:
    raw = _two_sources(tmp_path, knobs={"source_mix": {"a": 3, "b": 1}})
    result = build_corpus(
        spec_of(*raw["sources"], split=raw["split"], knobs=raw["knobs"]), tmp_path / "o"
    )
    shares = Counter(row["meta"]["source_name"] for row in read_rows(result.files["train"]))
    assert shares["a"] == 3 * shares["b"]
    assert shares["a"] == result.manifest["knobs"]["effects"]["source_mix"]["a"]["available"]
    val_sources = Counter(row["meta"]["source_name"] for row in read_rows(result.files["val"]))
    assert val_sources["b"] > 0  # val is never reshaped by the mix
    dropped = result.manifest["knobs"]["effects"]["dropped"]["source_mix"]
    assert dropped == result.counters["dropped_by_knobs"] > 0
    assert all(result.manifest["accounting"].values())


def test_source_mix_weight_zero_leaves_a_source_out_of_train(tmp_path: Path) -> None:
    raw = _two_sources(tmp_path, knobs={"source_mix": {"a": 1, "b": 0}})
    result = build_corpus(
        spec_of(*raw["sources"], split=raw["split"], knobs=raw["knobs"]), tmp_path / "o"
    )
    assert {row["meta"]["source_name"] for row in read_rows(result.files["train"])} == {"a"}


def test_heldout_breadth_sets_how_many_groups_leave_training(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", WORLDS)
    source = {"type": "trm_play_root", "name": "p", "path": str(root)}
    held = {}
    for breadth in (1, 3, 5):
        result = build_corpus(
            spec_of(source, knobs={"heldout_breadth": breadth}),
            tmp_path / f"o{breadth}",
            dry_run=True,
        )
        held[breadth] = set(result.manifest["split"]["groups"]["val"])
        assert result.manifest["splits"]["val"]["groups"] == breadth
        assert result.manifest["splits"]["train"]["groups"] == 8 - breadth
    # Growing the breadth only adds groups: the first ones held out stay held out.
    assert held[1] < held[3] < held[5]


def test_state_compression_keeps_fewer_fields_at_each_level(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 2, "grid-b": 2, "grid-c": 2}, episodes=1)
    source = {"type": "trm_play_root", "name": "p", "path": str(root)}
    states = {}
    for level in ("full", "keys", "minimal"):
        result = build_corpus(
            spec_of(
                source, knobs={"state_compression": level}, split={"by": "row", "val_fraction": 0}
            ),
            tmp_path / level,
        )
        first = read_rows(result.files["train"])[0]
        states[level] = json.loads(first["state"])
        assert (
            json.loads(
                read_rows(result.files["messages"])[0]["messages"][1]["content"].split("\n")[0][7:]
            )
            == states[level]
        )
    assert set(states["full"]) == {"encounter_id", "latent_norm", "metrics", "state"}
    assert states["keys"] == {"encounter_id": "e0-0", "state": {"goal": [3, 3], "pos": [0, 0]}}
    assert states["minimal"] == {"state.goal": [3, 3], "state.pos": [0, 0]}


def test_state_keys_choose_what_survives_compression(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 2, "grid-b": 2}, episodes=1)
    spec = spec_of(
        {"type": "trm_play_root", "name": "p", "path": str(root)},
        knobs={"state_compression": "keys", "state_keys": ["metrics"]},
        split={"val_fraction": 0},
    )
    result = build_corpus(spec, tmp_path / "o")
    assert {row["state"] for row in read_rows(result.files["train"])} == {
        '{"metrics":{"desirability":0.0}}',
        '{"metrics":{"desirability":0.1}}',
    }


def _noisy_play(tmp_path: Path) -> Path:
    tools = ["a", "b", "c"]
    rows = []
    for ep in range(40):
        rows.append(trace(ep, 0, 0, tools, kind="oracle"))
        rows.append(trace(ep, 1, 1, tools, kind="oracle"))
        rows.append(trace(ep, 2, 2, tools, kind="suboptimal"))
        rows.append(trace(ep, 3, 0, tools, kind="recovery"))
    write_jsonl(tmp_path / "play" / "worlds" / "grid-a" / "trm_traces.jsonl", rows)
    return tmp_path / "play"


def test_recovery_rate_sets_the_share_of_recovery_rows_in_train(tmp_path: Path) -> None:
    source = {"type": "trm_play_root", "name": "p", "path": str(_noisy_play(tmp_path))}
    for rate in (0.0, 0.1, 0.5):
        spec = spec_of(source, knobs={"recovery_rate": rate}, split={"val_fraction": 0.25})
        result = build_corpus(spec, tmp_path / f"o{rate}")
        train = read_rows(result.files["train"])
        share = sum(row["meta"]["kind"] == "recovery" for row in train) / len(train)
        assert abs(share - rate) < 0.03, (rate, share)
        effect = result.manifest["knobs"]["effects"]["recovery_rate"]
        assert effect["requested"] == rate and abs(effect["achieved"] - share) < 1e-3
        assert all(result.manifest["accounting"].values())


def test_negative_rate_sets_how_many_train_negatives_reach_critic(tmp_path: Path) -> None:
    source = {"type": "trm_play_root", "name": "p", "path": str(_noisy_play(tmp_path))}
    everything = build_corpus(spec_of(source), tmp_path / "all", dry_run=True)
    train_negatives = everything.manifest["knobs"]["effects"]["negative_rate"]["available"]
    assert everything.manifest["knobs"]["effects"]["negative_rate"]["kept"] == train_negatives
    result = build_corpus(spec_of(source, knobs={"negative_rate": 0.1}), tmp_path / "o")
    train_rows = result.counters["train"]
    critic = read_rows(result.files["critic"])
    in_train_groups = [row for row in critic if row["meta"]["split"] == "train"]
    assert len(in_train_groups) == round(0.1 * train_rows)
    assert result.manifest["knobs"]["effects"]["dropped"]["negative_rate"] == (
        train_negatives - len(in_train_groups)
    )


def test_namespace_normalization_maps_ids_to_shared_tags_and_keeps_raw_ids(tmp_path: Path) -> None:
    root = play_root(tmp_path / "play", {"grid-a": 2, "grid-b": 2, "grid-c": 2}, episodes=1)
    spec = spec_of(
        {"type": "trm_play_root", "name": "p", "path": str(root)},
        knobs={"namespace_normalization": True, "namespace_map": {"grid-c.east": "go_east"}},
        split={"val_fraction": 0},
    )
    result = build_corpus(spec, tmp_path / "o")
    rows = read_rows(result.files["train"])
    assert {tuple(row["tools"]) for row in rows} == {
        ("north", "south", "east"),
        ("north", "south", "go_east"),
    }
    sample = next(row for row in rows if row["meta"]["env"] == "grid-b")
    assert sample["meta"]["raw_tools"] == ["grid-b.north", "grid-b.south", "grid-b.east"]
    assert sample["meta"]["raw_action"] == f"grid-b.{sample['action']}"
    assert result.manifest["knobs"]["effects"]["namespace_normalization"]["rows_renamed"] == 6


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_namespace_maps_every_worlds_spelling_to_its_tags(tmp_path: Path, family) -> None:
    """`auto` reads each world's own action tags (world.json): every world spells its actions
    its own way, and every one of those spellings becomes the world's tag for it."""
    generate(tmp_path / "play", families=[family], worlds=4, episodes=3, seed=11)
    source = {"type": "trm_play_root", "name": "p", "path": str(tmp_path / "play")}
    spec = spec_of(source, knobs={"namespace_normalization": "auto"}, split={"val_fraction": 0})
    result = build_corpus(spec, tmp_path / "o")
    rows = read_rows(result.files["train"])
    tags = {}
    for world in (tmp_path / "play" / "worlds").iterdir():
        tags[world.name] = json.loads((world / "world.json").read_text())["action_tags"]
    assert len({tuple(sorted(t)) for t in tags.values()}) > 1  # the worlds spell them apart
    for row in rows:
        world_tags = tags[row["meta"]["world_id"]]
        assert row["tools"] == [world_tags[raw] for raw in row["meta"]["raw_tools"]]
        assert row["action"] == world_tags[row["meta"]["raw_action"]]
    effect = result.manifest["knobs"]["effects"]["namespace_normalization"]
    assert effect["rows_renamed"] >= len(rows) and effect["rows_kept_raw_on_collision"] == 0


def test_auto_namespace_reads_a_reasoning_traces_tags_field(tmp_path: Path) -> None:
    generate(
        tmp_path / "play",
        families=["route"],
        worlds=3,
        episodes=2,
        seed=5,
        formats=["reasoning_trace"],
    )
    source = {
        "type": "jsonl",
        "mode": "reasoning_trace",
        "name": "r",
        "path": str(tmp_path / "play" / "reasoning_traces.jsonl"),
        "state_fields": ["observation.request.intent"],
        "tools_field": "options.ids",
        "tags_field": "options.tags",
        "action_field": "decision.action",
        "meta_fields": ["meta.world_id"],
    }
    spec = spec_of(source, knobs={"namespace_normalization": "auto"}, split={"val_fraction": 0})
    rows = read_rows(build_corpus(spec, tmp_path / "o").files["train"])
    assert rows and {t for row in rows for t in row["tools"]} == {
        "route:TRM_ONLY",
        "route:TRM_PLUS_LLM",
        "route:LLM_DIRECT",
        "route:COMPILE_PROMPT",
    }


def test_namespace_collisions_keep_the_raw_ids_and_are_counted(tmp_path: Path) -> None:
    rows = [normalized({"i": i}, ["nav:go", "act:go"], "nav:go", env="e") for i in range(3)]
    path = write_jsonl(tmp_path / "n.jsonl", rows)
    spec = spec_of(
        {"type": "jsonl", "name": "n", "path": str(path)},
        knobs={"namespace_normalization": True},
        split={"val_fraction": 0},
    )
    result = build_corpus(spec, tmp_path / "o")
    assert {tuple(row["tools"]) for row in read_rows(result.files["train"])} == {
        ("nav:go", "act:go")
    }
    effect = result.manifest["knobs"]["effects"]["namespace_normalization"]
    assert effect == {"rows_renamed": 0, "rows_kept_raw_on_collision": 3}


def test_knobs_never_touch_the_anchor_rows(tmp_path: Path) -> None:
    source = {
        "type": "trm_play_root",
        "name": "p",
        "path": str(play_root(tmp_path / "play", WORLDS)),
    }
    plain = build_corpus(spec_of(source, split={"anchor": ["maze-w3"]}), tmp_path / "a")
    turned = build_corpus(
        spec_of(
            source,
            split={"anchor": ["maze-w3"]},
            knobs={"heldout_breadth": 3, "recovery_rate": 0.0, "negative_rate": 0.0},
            min_exact_positives=50,
        ),
        tmp_path / "b",
    )
    assert plain.files["anchor"].read_bytes() == turned.files["anchor"].read_bytes()
    assert plain.counters["anchor"] == 10
