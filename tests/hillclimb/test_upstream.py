"""`trm import-spec` on the original skill's search specs, as a user runs it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import importspec as importspec_cli
from core.schemas.hillclimb import HillclimbSpec
from worker.envs import generate


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="trm")
    sub = parser.add_subparsers(dest="verb", required=True)
    importspec_cli.register(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def _skill_search(tmp_path: Path, **extra: Any) -> Path:
    generate(tmp_path / "play", families=["route"], worlds=4, episodes=2, seed=0)
    _write(
        tmp_path / "corpus-spec.json",
        {"sources": [{"type": "trm_play_root", "name": "route", "path": "play"}], "dedupe": True},
    )
    spec = {
        "run_name": "skill search",
        "corpus_spec": "corpus-spec.json",
        "anchor_envs": ["route-s0-w3"],
        "ladder": {
            "start": 1,
            "levels": [
                "in_domain",
                "light_generalization",
                "cross_run",
                "cross_env_family",
                "broad_generalization",
                "hardest_setting",
            ],
        },
        "mutations": [
            {"knob": "negative_rate", "values": [0.0, 0.2, 0.4]},
            {"knob": "state_compression", "values": ["full", "keys", "minimal"]},
            {"knob": "learning_rate", "values": [0.001, 0.003]},
            {"knob": "temperature", "values": [0.1, 0.2]},
        ],
        "patience": 2,
        "max_candidates": 6,
        "max_generalization_gap": 0.12,
        "noise_margin": 0.015,
        "output_root": "C:/projects/aicoo/runs/hillclimb",
        "evaluator_command": "python evaluate_trm_scorecard.py",
        **extra,
    }
    return _write(tmp_path / "hillclimb-spec.sample.json", spec)


def test_import_spec_translates_the_skill_search_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ours.json"
    assert run("import-spec", str(_skill_search(tmp_path)), "--out", str(out)) == 0
    err = capsys.readouterr().err
    spec = HillclimbSpec.model_validate(json.loads(out.read_text()))
    assert spec.anchors == ["route-s0-w3"] and spec.start_rung == 1
    assert spec.knobs.negative_rate == [0.0, 0.2, 0.4]
    assert spec.knobs.state_compression == ["full", "keys", "minimal"]
    assert spec.trainer_knobs.lr == [0.001, 0.003]
    assert spec.max_generalization_gap == 0.12 and spec.patience == 2
    assert spec.base["corpus"]["sources"][0]["path"] == str((tmp_path / "play").resolve())
    for key in ("output_root", "evaluator_command", "mutations[3]", "max_generalization_gap"):
        assert f"{key}:" in err, key
    assert "hard ceiling" in err


def test_import_spec_names_every_missing_path_of_a_search_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _skill_search(
        tmp_path,
        corpus_spec="C:/projects/aicoo/corpus-spec.json",
        base_config="configs/router-training-spec.sample.json",
    )
    out = tmp_path / "ours.json"
    assert run("import-spec", str(path), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "corpus_spec: C:/projects/aicoo/corpus-spec.json does not exist (a Windows" in err
    assert "base_config: configs/router-training-spec.sample.json does not exist" in err
    assert not out.exists()


def test_a_routerbench_spec_with_a_ladder_becomes_a_search_on_our_routerbench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skill = {
        "bench": "routerBench",
        "template_root": "C:/projects/persistent-tesseract",
        "mutations": {"recovery_rate": [0.0, 0.1, 0.2], "namespace_normalization": [False, True]},
        "max_generalization_gap": 0.1,
        "max_candidates": 5,
    }
    assert run("import-spec", str(_write(tmp_path / "routerbench-spec.json", skill))) == 0
    spec = HillclimbSpec.model_validate(json.loads(capsys.readouterr().out))
    assert spec.anchors == ["route-s1000-w8", "route-s1000-w9"]
    assert spec.base["corpus"]["sources"][0]["path"] == "benches/routerbench"
    assert spec.knobs.recovery_rate == [0.0, 0.1, 0.2] and spec.max_candidates == 5


def test_a_routerbench_spec_without_search_keys_becomes_a_bench_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skill = {"bench": "routerbench", "template_root": "C:/x", "dry_run": True, "watch": True}
    assert run("import-spec", str(_write(tmp_path / "routerbench-spec.json", skill))) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"kind": "bench", "bench": "routerbench", "dry_run": True}
    assert "template_root: ignored" in captured.err and "watch: ignored" in captured.err
