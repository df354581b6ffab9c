"""Generate a puzzle set offline: `python -m worker.puzzles FAMILY --count N --out DIR [...]`.

Writes `puzzles.npz` and `puzzles.json` (worker/puzzles/sets.py) into DIR; every answer is
checked by the family's oracle as it is made. The same arguments always give the same set.

    python -m worker.puzzles sudoku --side 9 --givens 22 --technique search --count 1000 --out s
    python -m worker.puzzles maze --side 30 --wall-share 0.48 --min-path 110 --count 1000 --out m
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from worker.puzzles.sets import PUZZLES, MazeParams, Params, SudokuParams, generate_set


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.puzzles", description=__doc__)
    parser.add_argument("family", choices=sorted(PUZZLES))
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="processes drawing at once")
    parser.add_argument("--side", type=int, help="sudoku 9, 6 or 4 (default 9); maze (30)")
    parser.add_argument("--givens", type=int, default=SudokuParams().givens)
    parser.add_argument("--technique", choices=("singles", "search", "any"), default="search")
    parser.add_argument("--wall-share", type=float, default=MazeParams().wall_share)
    parser.add_argument("--min-path", type=int, default=MazeParams().min_path)
    parser.add_argument("--style", choices=("random", "carved"), default=MazeParams().style)
    args = parser.parse_args(argv)
    if not 1 <= args.count <= 1_000_000:
        parser.error("--count: between 1 and 1000000")
    params: Params
    if args.family == "sudoku":
        if (args.side or 9) not in (4, 6, 9):
            parser.error("--side: a sudoku is 4, 6 or 9 wide")
        params = SudokuParams(args.side or 9, args.givens, args.technique)
    else:
        if not 4 <= (args.side or 30) <= 64 or not 0 <= args.wall_share < 1:
            parser.error("--side: 4..64 for a maze; --wall-share: 0 to under 1")
        params = MazeParams(args.side or 30, args.wall_share, args.min_path, args.style)
    started = time.monotonic()
    try:
        made = generate_set(args.family, params, args.count, args.seed, jobs=args.jobs)
    except ValueError as exc:  # the generator found none of the asked kind
        print(f"python -m worker.puzzles: {exc}", file=sys.stderr)
        return 2
    made.save(args.out)
    seconds = time.monotonic() - started
    print(f"{len(made)} {args.family} puzzles ({params}) in {seconds:.1f} s: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
