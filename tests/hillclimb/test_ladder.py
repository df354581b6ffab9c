"""What a rung does to the data, read from real corpora built from real env play logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from core.schemas.corpus import CorpusSpec
from core.schemas.hillclimb import HillclimbSpec
from tests.hillclimb.conftest import base_train, search_spec
from worker.corpus import build_corpus
from worker.envs import generate
from worker.hillclimb.ladder import DEFAULT_LADDER, at_rung, candidate_spec, root_knobs
from worker.hillclimb.mutate import mutate, ranges_of


@pytest.fixture(scope="module")
def play(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("play")
    generate(root, families=["route", "grid"], worlds=4, episodes=6, seed=0)
    return root


def test_each_rung_holds_out_other_groups_and_compresses_the_state(
    play: Path, tmp_path: Path
) -> None:
    base = base_train(anchor=["grid-s0-w3"])
    base["corpus"]["sources"][0]["path"] = str(play)
    spec = search_spec(base=base)
    manifests: list[dict[str, Any]] = []
    for rung in range(6):
        knobs = at_rung(root_knobs(spec), DEFAULT_LADDER[rung])
        body = candidate_spec(spec, rung, knobs, f"r{rung}", seed=0)
        corpus = CorpusSpec.model_validate(body["corpus"])
        manifests.append(build_corpus(corpus, tmp_path / f"r{rung}").manifest)
    levels = [m["split"]["by"] for m in manifests]
    assert levels == ["episode", "episode", "run", "env", "env", "env"]
    val = [frozenset(m["split"]["groups"]["val"]) for m in manifests]
    assert [len(v) for v in val] == [1, 3, 1, 1, 2, 3]
    assert len(set(val)) == 6  # every rung holds out something else
    # The anchors stay put on every rung.
    assert {tuple(m["split"]["anchor_names"]) for m in manifests} == {("grid-s0-w3",)}
    assert len({m["splits"]["anchor"]["rows"] for m in manifests}) == 1
    assert all(m["split"]["disjoint"] for m in manifests)
    assert len({m["corpus_hash"] for m in manifests}) == 6
    assert [m["knobs"]["state_compression"] for m in manifests] == [
        "full",
        "full",
        "keys",
        "keys",
        "keys",
        "minimal",
    ]
    assert manifests[4]["knobs"]["namespace_normalization"] is True


def test_mutation_is_local_and_deterministic_in_the_seed() -> None:
    spec = search_spec()
    ranges = ranges_of(spec)
    parent = root_knobs(spec)
    first = [mutate(parent, ranges, 0, seed=7, index=i, tried=set()) for i in range(1, 20)]
    again = [mutate(parent, ranges, 0, seed=7, index=i, tried=set()) for i in range(1, 20)]
    assert first == again
    for child in first:
        assert child is not None
        turned = [k for k in child if child[k] != parent[k]]
        assert 1 <= len(turned) <= 2
        for name in turned:  # one step along the range
            values = ranges[name]
            assert abs(values.index(child[name]) - values.index(parent[name])) == 1


def test_the_base_must_be_a_valid_train_spec_and_anchors_are_required() -> None:
    with pytest.raises(ValidationError, match=r"base\.corpus"):
        HillclimbSpec.model_validate({"kind": "hillclimb", "base": {"trainer": "trm"}})
    with pytest.raises(ValidationError, match="anchors"):
        HillclimbSpec.model_validate({"kind": "hillclimb", "base": base_train(anchor=[])})
    spec = HillclimbSpec.model_validate(
        {"kind": "hillclimb", "base": base_train(anchor=[]), "anchors": ["route-s0-w5"]}
    )
    assert spec.base["corpus"]["split"]["anchor"] == ["route-s0-w5"]
    assert spec.base["kind"] == "train" and spec.base["trm"]["hidden"] == 64
    with pytest.raises(ValidationError, match="source_mix"):
        HillclimbSpec.model_validate(
            {"kind": "hillclimb", "base": base_train(), "knobs": {"source_mix": [{"x": 1.0}]}}
        )


def test_trainer_knobs_are_off_unless_asked_for() -> None:
    assert not any(name.startswith("trainer.") for name in ranges_of(search_spec()))
    spec = search_spec(trainer_knobs={"hidden": [32, 64, 128]})
    assert ranges_of(spec)["trainer.hidden"] == [32, 64, 128]
    knobs = {**root_knobs(spec), "trainer.hidden": 128}
    assert candidate_spec(spec, 0, knobs, "c", 0)["trm"]["hidden"] == 128
