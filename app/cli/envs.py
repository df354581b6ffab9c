"""`trm envs`: the controller environments (SPEC §5): list the families, generate play logs,
materialize a shipped bench's data. The whole-answer puzzle families (`sudoku`, `maze`:
worker/puzzles/) are listed and generated here too: a puzzle set per family, for a `puzzles`
corpus source of a `trm_grid` train run."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

# Kept here (not imported from worker.envs) so `trm --help` does not load the environments.
FAMILY_NAMES = ("route", "grid", "rebalance", "schedule", "verify")
PUZZLE_NAMES = ("sudoku", "maze")
FORMAT_NAMES = ("trm_play_root", "router_jsonl", "reasoning_trace")


def register(sub: argparse._SubParsersAction) -> None:
    envs = sub.add_parser("envs", help="controller environments: list families, generate play logs")
    verbs = envs.add_subparsers(dest="envs_verb", required=True, metavar="ACTION")

    listing = verbs.add_parser("list", help="list the environment families")
    listing.set_defaults(func=list_families)

    gen = verbs.add_parser(
        "generate",
        help="write play logs for some families (deterministic in the arguments)",
        description="Play oracle episodes with a share of labelled bad steps and write them.",
    )
    gen.add_argument(
        "--families",
        type=_families,
        default=list(FAMILY_NAMES),
        help=f"comma-separated, from {','.join(FAMILY_NAMES)} (default: all), or the "
        f"puzzle families {','.join(PUZZLE_NAMES)} (a puzzle set each, in OUT/<family>/)",
    )
    gen.add_argument("--worlds", type=_positive, default=4, help="worlds per family (default 4)")
    gen.add_argument(
        "--episodes", type=_positive, default=20, help="episodes per world (default 20)"
    )
    gen.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    gen.add_argument(
        "--noise",
        type=_share,
        default=0.2,
        help="share of steps that are deliberate bad picks, 0..1 (default 0.2)",
    )
    gen.add_argument("--out", type=Path, required=True, help="output folder")
    gen.add_argument(
        "--format",
        type=_formats,
        default=["trm_play_root"],
        help=f"comma-separated, from {','.join(FORMAT_NAMES)} (default trm_play_root)",
    )
    gen.add_argument(
        "--force", action="store_true", help="replace data generated there before (default: off)"
    )
    puzzles = gen.add_argument_group("puzzle families (sudoku, maze)")
    puzzles.add_argument("--count", type=_positive, default=200, help="puzzles (default 200)")
    puzzles.add_argument("--side", type=int, help="sudoku 4, 6 or 9 (default 9); maze 4-64 (30)")
    puzzles.add_argument(
        "--givens", type=int, help="sudoku: dig down to this many givens (default 24)"
    )
    puzzles.add_argument(
        "--technique",
        choices=("singles", "search", "any"),
        help="sudoku: what it must need (default search)",
    )
    puzzles.add_argument(
        "--wall-share", type=_share, help="maze: share of cells that are walls (default 0.48)"
    )
    puzzles.add_argument(
        "--min-path", type=int, help="maze: shortest path of at least this (default 110)"
    )
    puzzles.add_argument(
        "--style", choices=("random", "carved"), help="maze: how walls are laid (default carved)"
    )
    gen.set_defaults(func=generate_logs)

    bench = verbs.add_parser("bench", help="generate a shipped bench's data into DATA_DIR (once)")
    bench.add_argument("name", help="bench name, e.g. routerbench")
    bench.add_argument("--data-dir", type=Path, default=None, help="default: settings DATA_DIR")
    bench.set_defaults(func=bench_data)


def list_families(args: argparse.Namespace) -> int:
    from worker.envs.families import SUMMARIES
    from worker.puzzles import PUZZLES

    width = max(len(name) for name in [*SUMMARIES, *PUZZLES])
    for name, summary in SUMMARIES.items():
        print(f"{name:<{width}}  {summary}")
    for name, family in PUZZLES.items():  # whole-answer puzzles: a set, not play logs
        print(f"{name:<{width}}  [puzzle set, trainer trm_grid] {family.summary}")
    return 0


def generate_logs(args: argparse.Namespace) -> int:
    puzzles = [name for name in args.families if name in PUZZLE_NAMES]
    args.families = [name for name in args.families if name not in PUZZLE_NAMES]
    for family in puzzles:
        if (code := generate_puzzles(args, family)) != 0:
            return code
    return generate_play_logs(args) if args.families else 0


def generate_puzzles(args: argparse.Namespace, family: str) -> int:
    """A puzzle set in OUT/<family>/ (worker/puzzles/sets.py), every answer checked."""
    from dataclasses import replace

    from worker.puzzles import MazeParams, Params, SudokuParams, generate_set

    def given(**asked: Any) -> dict[str, Any]:
        return {k: v for k, v in asked.items() if v is not None}

    params: Params
    if family == "sudoku":
        asked = given(side=args.side, givens=args.givens, technique=args.technique)
        params = replace(SudokuParams(), **asked)
        if params.side not in (4, 6, 9):
            return _fail("--side: a sudoku is 4, 6 or 9 wide")
    else:
        asked = given(
            side=args.side, wall_share=args.wall_share, min_path=args.min_path, style=args.style
        )
        params = replace(MazeParams(), **asked)
        if not (4 <= params.side <= 64 and params.wall_share < 1):
            return _fail("--side: 4..64 for a maze; --wall-share: under 1")
    out = args.out / family
    if (out / "puzzles.json").exists() and not args.force:
        return _fail(f"--out: {out} already holds a puzzle set; pass --force to replace it")
    started = time.monotonic()
    try:
        made = generate_set(family, params, args.count, args.seed)
    except ValueError as exc:  # the generator found none of the asked kind
        return _fail(f"{family}: {exc}")
    made.save(out)
    print(f"made {len(made)} {family} puzzles in {time.monotonic() - started:.1f}s ({params})")
    source = json.dumps({"type": "puzzles", "name": family, "path": str(out)})
    print(f"  {out}/puzzles.npz, puzzles.json: corpus source {source} (trainer trm_grid)")
    return 0


def generate_play_logs(args: argparse.Namespace) -> int:
    from worker.envs.generate import generate

    if "router_jsonl" in args.format and "route" not in args.families:
        return _fail("--format router_jsonl needs the route family in --families")
    started = time.monotonic()
    try:
        result = generate(
            args.out,
            families=args.families,
            worlds=args.worlds,
            episodes=args.episodes,
            seed=args.seed,
            noise=args.noise,
            formats=args.format,
            replace=args.force,
        )
    except FileExistsError as exc:
        return _fail(f"--out: {exc}; pass --force to replace it")
    elapsed = time.monotonic() - started
    kinds: Counter[str] = Counter()
    for world in result.manifest["per_world"]:
        kinds.update(world["kinds"])
    print(
        f"played {sum(kinds.values())} decisions in {elapsed:.1f}s: {len(args.families)} "
        f"families x {args.worlds} worlds x {args.episodes} episodes "
        f"(seed {args.seed}, noise {args.noise})"
    )
    print("  kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    worlds = [f for f in result.files if f["path"].startswith("worlds/")]
    if worlds:
        rows = sum(f["rows"] for f in worlds)
        print(
            f"  {args.out / 'worlds'}/<world_id>/trm_traces.jsonl: {len(worlds)} files, {rows} rows"
        )
    for file in result.files:
        if not file["path"].startswith("worlds/"):
            print(f"  {args.out / file['path']}: {file['rows']} rows")
    print(f"  {args.out / 'envs_manifest.json'}: worlds, counts, sha256, corpus sources[]")
    return 0


def bench_data(args: argparse.Namespace) -> int:
    from worker.envs.benchdata import ensure_bench_data, load_bench

    data_dir = args.data_dir
    if data_dir is None:
        from core.settings import get_settings

        data_dir = get_settings().data_dir
    try:
        bench = load_bench(args.name)
    except FileNotFoundError as exc:
        return _fail(f"name: {exc}")
    folder = ensure_bench_data(args.name, data_dir)
    print(f"{args.name}: {folder} (anchors: {', '.join(bench.anchor_worlds)})")
    return 0


def _fail(message: str) -> int:
    print(f"trm envs: {message}", file=sys.stderr)
    return 2


def _families(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one family")
    for name in names:
        if name not in FAMILY_NAMES + PUZZLE_NAMES:
            known = ", ".join(FAMILY_NAMES + PUZZLE_NAMES)
            raise argparse.ArgumentTypeError(f"unknown family {name!r} (known: {known})")
    return list(dict.fromkeys(names))


def _formats(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names or [""]:
        if name not in FORMAT_NAMES:
            raise argparse.ArgumentTypeError(
                f"unknown format {name!r} (known: {', '.join(FORMAT_NAMES)})"
            )
    return list(dict.fromkeys(names))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value
