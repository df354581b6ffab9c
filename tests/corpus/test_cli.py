"""`trm corpus build` and `trm import-spec` as a user runs them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from app.cli import corpus as corpus_cli
from app.cli import importspec as importspec_cli
from core.schemas.corpus import CorpusSpec
from tests.corpus.corpus_logs import play_root, write_jsonl


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="trm")
    sub = parser.add_subparsers(dest="verb", required=True)
    corpus_cli.register(sub)
    importspec_cli.register(sub)
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_corpus_build_resolves_paths_against_the_spec_and_prints_a_summary(
    tmp_path: Path, broken_play_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = tmp_path / "specs" / "corpus.json"
    spec_path.parent.mkdir()
    spec_path.write_text(
        json.dumps({"sources": [{"type": "trm_play_root", "name": "play", "path": "../play"}]})
    )
    assert run("corpus", "build", str(spec_path), "--out", str(tmp_path / "out")) == 0
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["corpus_hash"][:16] in out
    assert "label_out_of_range" in out and "worlds/grid-a/trm_traces.jsonl:3" in out
    assert "split by env" in out and f"train {manifest['splits']['train']['rows']} rows" in out


def test_corpus_build_dry_run_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play_root(tmp_path / "play", {"a-1": 2, "b-1": 2, "c-1": 2})
    spec_path = tmp_path / "corpus.json"
    spec_path.write_text(
        json.dumps({"sources": [{"type": "trm_play_root", "name": "p", "path": "play"}]})
    )
    assert run("corpus", "build", str(spec_path), "--out", str(tmp_path / "out"), "--dry-run") == 0
    assert "dry run, nothing written" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_corpus_build_accepts_a_train_spec_and_names_bad_fields_with_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = tmp_path / "train.json"
    spec_path.write_text(
        '{\n  "kind": "train",\n  "corpus": {\n    "sources": [\n'
        '      {"type": "jsonl", "name": "n", "path": "x.jsonl", "colour": "red"}\n    ]\n  }\n}\n'
    )
    assert run("corpus", "build", str(spec_path), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert f"{spec_path}:5: corpus.sources[0].jsonl.colour" in err


def test_corpus_build_reports_bad_json_and_missing_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"sources": [\n  {"type": "jsonl",,}\n]}')
    assert run("corpus", "build", str(bad), "--out", str(tmp_path / "o")) == 2
    assert f"{bad}:2: not valid JSON" in capsys.readouterr().err

    missing = tmp_path / "missing.json"
    missing.write_text(
        json.dumps({"sources": [{"type": "jsonl", "name": "n", "path": "nope.jsonl"}]})
    )
    assert run("corpus", "build", str(missing), "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "sources[0].path" in err and str(tmp_path / "nope.jsonl") in err
    assert not (tmp_path / "o").exists()


def test_corpus_build_points_skill_specs_to_import_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skill = tmp_path / "skill.json"
    skill.write_text(json.dumps({"sources": [], "train_ratio": 0.9}))
    assert run("corpus", "build", str(skill), "--out", str(tmp_path / "o")) == 2
    assert "trm import-spec" in capsys.readouterr().err


def _skill_spec(tmp_path: Path, **extra) -> Path:
    play_root(tmp_path / "data" / "play", {"a-1": 2, "b-1": 2, "c-1": 2})
    write_jsonl(tmp_path / "data" / "traces.jsonl", [{"s": 1, "a": "x"}])
    spec = {
        "sources": [
            {"type": "trm_play_root", "path": "data/play", "weight": 2},
            {
                "type": "jsonl",
                "name": "traces",
                "path": "data/traces.jsonl",
                "mode": "reasoning_trace",
                "state_fields": ["s"],
                "action_field": "a",
                "tools_default": ["x", "y"],
                "notes": "from the lab",
            },
        ],
        "dedupe": True,
        "train_ratio": 0.8,
        "shuffle_seed": 11,
        "output_dir": "C:/projects/aicoo/corpus",
        "max_rows": 1000,
        **extra,
    }
    path = tmp_path / "skill_corpus.json"
    path.write_text(json.dumps(spec))
    return path


def test_import_spec_translates_the_skill_corpus_spec_with_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ours.json"
    assert run("import-spec", str(_skill_spec(tmp_path)), "--out", str(out)) == 0
    err = capsys.readouterr().err
    ours = json.loads(out.read_text())
    spec = CorpusSpec.model_validate(ours)
    assert spec.split.val_fraction == pytest.approx(0.2) and spec.split.seed == 11
    assert spec.split.by is None  # group split by SPEC §4's rule
    assert spec.sources[0].path == str((tmp_path / "data" / "play").resolve())
    assert spec.knobs.source_mix == {"trm_play_root_0": 2.0, "traces": 1.0}
    for key in (
        "train_ratio",
        "shuffle_seed",
        "output_dir",
        "max_rows",
        "sources[1].notes",
        "sources[0].name",
        "sources[0].weight",
    ):
        assert f"warning: {tmp_path / 'skill_corpus.json'}: {key}" in err, key
    assert "group split" in err


def test_import_spec_keeps_a_row_split_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("import-spec", str(_skill_spec(tmp_path)), "--split-by", "row") == 0
    assert json.loads(capsys.readouterr().out)["split"]["by"] == "row"


def test_import_spec_names_every_missing_path_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "sources": [
            {"type": "trm_play_root", "name": "p", "path": "C:/projects/aicoo/play"},
            {"type": "jsonl", "name": "j", "path": "/mnt/c/projects/traces.jsonl"},
            {"type": "jsonl", "name": "k", "path": "relative/missing.jsonl"},
        ],
        "train_ratio": 0.9,
    }
    path = tmp_path / "skill.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "ours.json"
    assert run("import-spec", str(path), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "sources[0].path: C:/projects/aicoo/play does not exist (a Windows default" in err
    assert "sources[1].path: /mnt/c/projects/traces.jsonl does not exist" in err
    assert "sources[2].path: relative/missing.jsonl does not exist" in err
    assert "3 error(s); nothing written" in err
    assert not out.exists()


def test_import_spec_refuses_files_it_does_not_recognise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"model": "x"}))
    assert run("import-spec", str(path)) == 2
    assert "not a spec file of the original skill we know" in capsys.readouterr().err
