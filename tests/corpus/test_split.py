"""Group splits: the default level, disjoint groups, held-out anchors, determinism in the seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.corpus_logs import normalized, play_root, read_rows, spec_of, write_jsonl
from worker.corpus import CorpusInputError, build_corpus

SIX_WORLDS = {f"{fam}-w{i}": 4 for fam in ("grid", "maze") for i in range(3)}


def _play(tmp_path: Path, worlds: dict[str, int] = SIX_WORLDS, **fields) -> tuple:
    root = play_root(tmp_path / "play", worlds, episodes=3)
    return spec_of({"type": "trm_play_root", "name": "play", "path": str(root)}, **fields), root


def _groups_in_file(path: Path, level: str) -> set[str]:
    keys = set()
    for row in read_rows(path):
        meta = row["meta"]
        parts = [meta["env"], meta["run"], str(meta["episode"])]
        keys.add("/".join(parts[: ("env", "run", "episode").index(level) + 1]))
    return keys


def test_three_or_more_envs_split_by_env_and_no_env_is_in_two_splits(tmp_path: Path) -> None:
    spec, _ = _play(tmp_path, split={"val_fraction": 0.34})
    result = build_corpus(spec, tmp_path / "out")
    split = result.manifest["split"]
    assert split["by"] == "env" and split["disjoint"] is True
    train = _groups_in_file(result.files["train"], "env")
    val = _groups_in_file(result.files["val"], "env")
    assert not train & val
    assert len(val) == 2 and len(train) == 4
    assert sorted(split["groups"]["val"]) == sorted(val)


def test_fewer_than_three_envs_split_by_run_then_by_episode(tmp_path: Path) -> None:
    rows_by_run = [
        normalized({"i": i}, ["a", "b"], "a", env="solo", run=f"r{i % 3}", episode=i)
        for i in range(12)
    ]
    path = write_jsonl(tmp_path / "runs.jsonl", rows_by_run)
    spec = spec_of({"type": "jsonl", "name": "n", "path": str(path)})
    assert build_corpus(spec, tmp_path / "o1", dry_run=True).manifest["split"]["by"] == "run"

    one_run = [normalized({"i": i}, ["a", "b"], "a", env="solo", episode=i // 2) for i in range(12)]
    path = write_jsonl(tmp_path / "episodes.jsonl", one_run)
    spec = spec_of({"type": "jsonl", "name": "n", "path": str(path)})
    result = build_corpus(spec, tmp_path / "o2")
    assert result.manifest["split"]["by"] == "episode"
    train = _groups_in_file(result.files["train"], "episode")
    val = _groups_in_file(result.files["val"], "episode")
    assert val and not train & val


def test_anchor_worlds_are_held_out_entirely_and_listed(tmp_path: Path) -> None:
    spec, _ = _play(tmp_path, split={"anchor": ["maze-w2", "grid-w0"]})
    result = build_corpus(spec, tmp_path / "out")
    anchor_envs = {row["meta"]["env"] for row in read_rows(result.files["anchor"])}
    assert anchor_envs == {"maze-w2", "grid-w0"}
    trained = {row["meta"]["env"] for row in read_rows(result.files["train"])}
    validated = {row["meta"]["env"] for row in read_rows(result.files["val"])}
    assert not anchor_envs & (trained | validated)
    split = result.manifest["split"]
    assert sorted(split["groups"]["anchor"]) == ["grid-w0", "maze-w2"]
    assert split["anchor_names"]["maze-w2"] == {"level": "env", "rows": 12}
    assert result.counters["anchor"] == 24


def test_an_anchor_name_that_matches_nothing_is_reported(tmp_path: Path) -> None:
    spec, _ = _play(tmp_path, split={"anchor": ["grid-w0", "nowhere"]})
    manifest = build_corpus(spec, tmp_path / "out", dry_run=True).manifest
    assert manifest["split"]["anchor_missing"] == ["nowhere"]
    assert any("'nowhere' matches no env" in w for w in manifest["warnings"])


def test_an_anchor_finer_than_the_split_level_is_refused(tmp_path: Path) -> None:
    spec, _ = _play(tmp_path, split={"by": "env", "anchor": ["grid-w0/play/1"]})
    with pytest.raises(CorpusInputError, match=r"split\.anchor: grid-w0/play/1 .*finer"):
        build_corpus(spec, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_same_seed_gives_byte_identical_files_and_another_seed_another_split(
    tmp_path: Path,
) -> None:
    spec, _ = _play(tmp_path, split={"seed": 7, "by": "episode"})
    first = build_corpus(spec, tmp_path / "a")
    second = build_corpus(spec, tmp_path / "b")
    for name in ("train", "val", "anchor", "critic", "messages", "messages_val", "manifest"):
        assert first.files[name].read_bytes() == second.files[name].read_bytes(), name
    assert first.corpus_hash == second.corpus_hash

    splits = set()
    for seed in (1, 2, 3):
        other = spec.model_copy(update={"split": spec.split.model_copy(update={"seed": seed})})
        result = build_corpus(other, tmp_path / f"s{seed}", dry_run=True)
        splits.add(tuple(result.manifest["split"]["groups"]["val"]))
        assert result.corpus_hash != first.corpus_hash
    splits.add(tuple(first.manifest["split"]["groups"]["val"]))
    assert len(splits) == 4


def test_row_split_keeps_each_row_whole_and_disjoint(tmp_path: Path) -> None:
    spec, _ = _play(tmp_path, split={"by": "row", "val_fraction": 0.25})
    result = build_corpus(spec, tmp_path / "out")
    manifest = result.manifest
    assert manifest["split"]["by"] == "row" and manifest["split"]["disjoint"]
    assert manifest["splits"]["val"]["groups"] == manifest["splits"]["val"]["rows"] == 18
    assert result.counters["train"] == 72 - 18
