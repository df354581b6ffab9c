"""`trm envs list` and `trm envs generate`: what a user types and reads."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from app.cli import envs


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trm")
    envs.register(parser.add_subparsers(dest="verb", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_list_names_every_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["envs", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["route", "grid", "rebalance", "schedule", "verify", "sudoku", "maze"]


def test_generate_writes_the_play_root_and_says_what_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "logs"
    argv = [
        "envs",
        "generate",
        "--families",
        "route,grid",
        "--worlds",
        "2",
        "--episodes",
        "5",
        "--seed",
        "3",
        "--noise",
        "0.2",
        "--out",
        str(out),
        "--format",
        "trm_play_root,router_jsonl",
    ]
    assert run(argv) == 0
    said = capsys.readouterr().out
    assert "2 families x 2 worlds x 5 episodes" in said and "router.jsonl" in said
    assert sorted(p.name for p in (out / "worlds").iterdir()) == [
        "grid-s3-w0",
        "grid-s3-w1",
        "route-s3-w0",
        "route-s3-w1",
    ]
    assert run(argv) == 2  # the folder holds data now
    assert "--force" in capsys.readouterr().err
    assert run([*argv, "--force"]) == 0


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--families", "route,chess", "argument --families: unknown family 'chess'"),
        ("--worlds", "0", "argument --worlds: must be at least 1"),
        ("--episodes", "many", "argument --episodes: 'many' is not a whole number"),
        ("--noise", "1.5", "argument --noise: must be between 0 and 1"),
        ("--format", "csv", "argument --format: unknown format 'csv'"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(["envs", "generate", "--out", str(tmp_path), flag, value])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_router_format_without_the_route_family_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        [
            "envs",
            "generate",
            "--families",
            "grid",
            "--format",
            "router_jsonl",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert code == 2
    assert "--format router_jsonl needs the route family" in capsys.readouterr().err


def test_bench_materializes_a_shipped_bench_and_names_its_anchors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["envs", "bench", "routerbench", "--data-dir", str(tmp_path)]) == 0
    said = capsys.readouterr().out
    assert str(tmp_path / "benches" / "routerbench") in said and "route-s1000-w8" in said
    assert run(["envs", "bench", "nope", "--data-dir", str(tmp_path)]) == 2
    assert "name: no bench 'nope'" in capsys.readouterr().err


def test_generate_writes_a_puzzle_set_and_names_its_corpus_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "envs",
        "generate",
        "--families",
        "sudoku",
        "--side",
        "4",
        "--givens",
        "6",
        "--technique",
        "any",
        "--count",
        "5",
        "--out",
        str(tmp_path),
    ]
    assert run(argv) == 0
    meta = json.loads((tmp_path / "sudoku" / "puzzles.json").read_text())
    assert meta["count"] == 5 and meta["params"]["side"] == 4
    said = capsys.readouterr().out
    assert f'"type": "puzzles", "name": "sudoku", "path": "{tmp_path / "sudoku"}"' in said
    assert run(argv) == 2  # not replaced without --force
    assert "already holds a puzzle set" in capsys.readouterr().err
