"""Benchmark: the controllers on published data sets nobody here wrote, scored as their
communities score them.

    .venv/bin/python bench/external.py [--sets routellm,bfcl,jobshop] [--seeds 0,1,2]
        [--methods baselines,gbdt,trm,trm-1step] [--data NAME=PATH ...] [--train-rows N]
        [--text-encoder tokens|smollm2] [--splits 0,1,2,3,4] [--folds 0,1]
        [--work DIR] [--keep] [--json FILE]

Each data set is a bench registered in `worker.external.BENCHES`; this script runs the ones asked
for (default: every registered one whose data is found, saying which were skipped and why), then
prints one markdown table (dataset, anchor set, method, the community's metric with its 95%
interval, examples scored, seeds, training seconds, other figures) under the date, the git commit
and the CPU, and a PASS/MISS line per target a bench declares (its optional `targets(rows)`).

Data: `--data NAME=PATH` (a user's own copy); else `../shared/datasets/NAME` beside the checkout
when it is there; else the bench gets no path and finds its data itself (an installed package)
or says it has none. Methods: `baselines` (each bench's own) and the learned ones
(worker.external.common.LEARNED); `qlora` is opt-in (slow on a CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import cpu_kind  # noqa: E402
from worker.external import BENCHES, BenchRow  # noqa: E402
from worker.external.common import LEARNED  # noqa: E402

DEFAULT_METHODS = "baselines,gbdt,trm,trm-1step"
SHARED = ROOT.parent / "shared" / "datasets"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def data_paths(pairs: list[str]) -> dict[str, Path]:
    """`--data NAME=PATH` overrides over the shared copies found beside the checkout."""
    paths = {name: SHARED / name for name in BENCHES if (SHARED / name).exists()}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or name not in BENCHES:
            raise SystemExit(f"--data {pair!r}: want NAME=PATH with NAME one of {sorted(BENCHES)}")
        paths[name] = Path(path).expanduser()
    return paths


def header() -> str:
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"External benches, {today}, commit {commit}, {cpu_kind()}"


def _extra(row: BenchRow) -> str:
    return ", ".join(f"{key} {value:.3f}" for key, value in row.extra.items()) or "-"


def table(rows: list[BenchRow]) -> str:
    lines = [
        "| dataset | anchors | method | metric | value [95% CI] | n | seeds | train s | extras |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seconds = "-" if r.train_seconds is None else f"{r.train_seconds:.1f}"
        arrow = "" if r.higher_is_better else " (lower is better)"
        lines.append(
            f"| {r.dataset} | {r.anchors} | {r.method} | {r.metric}{arrow} | {r.value:.3f} "
            f"[{r.ci95[0]:.3f}, {r.ci95[1]:.3f}] | {r.n} | {r.seeds} | {seconds} | {_extra(r)} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets",
        help=f"comma-separated, of {', '.join(BENCHES)} (default: all whose data is found)",
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--methods", default=DEFAULT_METHODS, help=f"baselines and any of {', '.join(LEARNED)}"
    )
    parser.add_argument("--data", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument(
        "--train-rows",
        type=int,
        help="cap on the learned methods' train rows, for the benches that sample them (0: all)",
    )
    parser.add_argument(
        "--text-encoder",
        choices=("tokens", "smollm2"),
        help="the trm's and gbdt's text_encoder, for the benches that take it (routellm; "
        "default: each its own, the routellm trm smollm2 and the gbdt tokens)",
    )
    parser.add_argument(
        "--splits",
        help="the anchor splits run, for the benches that draw their anchors (routellm: the "
        "seeds its unseen subjects are drawn at; default 0,1,2,3,4): each split's rows and "
        "their mean, which the targets judge; one split, its rows alone",
    )
    parser.add_argument(
        "--folds",
        help="the folds whose anchors are scored, for the benches that deal folds (bfcl: of "
        "0-4; default all): a quicker, partial figure over those folds' rows only",
    )
    parser.add_argument("--work", type=Path, help="where corpora and models go (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep --work's contents afterwards")
    parser.add_argument("--json", type=Path, help="also write the rows and targets as JSON")
    args = parser.parse_args()

    seeds = [int(s) for s in args.seeds.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m != "baselines" and m not in LEARNED]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; baselines and {', '.join(LEARNED)}")
    asked = args.sets.split(",") if args.sets else list(BENCHES)
    missing = [name for name in asked if name not in BENCHES]
    if missing:
        raise SystemExit(f"--sets: not registered {missing}; registered: {', '.join(BENCHES)}")
    paths = data_paths(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="trm-external-"))

    rows: list[BenchRow] = []
    targets: list[tuple[str, bool, str]] = []
    skipped: dict[str, str] = {}
    try:
        for name in asked:
            bench = BENCHES[name]
            if args.train_rows is not None and hasattr(bench, "train_rows"):
                bench.train_rows = args.train_rows or None
            if args.text_encoder is not None and hasattr(bench, "text_encoder"):
                bench.text_encoder = args.text_encoder
            if args.splits is not None and hasattr(bench, "splits"):
                bench.splits = tuple(int(k) for k in args.splits.split(","))
            if args.folds is not None and hasattr(bench, "folds"):
                bench.folds = [int(k) for k in args.folds.split(",")]
            (work / name).mkdir(parents=True, exist_ok=True)
            try:
                found = bench.run(work / name, paths.get(name), methods, seeds, log)
            except FileNotFoundError as why:
                skipped[name] = str(why)
                log(f"{name}: skipped: {why}")
                continue
            rows += found
            judge = getattr(bench, "targets", None)
            if judge is not None:
                targets += [(f"{name} {what}", met, seen) for what, met, seen in judge(found)]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(f"{header()}\n")
    print(table(rows))
    print()
    for name, reason in skipped.items():
        print(f"SKIP  {name}: {reason}")
    for what, met, seen in targets:
        print(f"{'PASS' if met else 'MISS'}  {what}: {seen}")
    if args.json:
        out: dict[str, Any] = {
            "header": header(),
            "seeds": seeds,
            "methods": methods,
            "rows": [dataclasses.asdict(r) for r in rows],
            "targets": [{"target": w, "met": m, "measured": s} for w, m, s in targets],
            "skipped": skipped,
        }
        args.json.write_text(json.dumps(out, indent=2))
    # Data asked for by name and not found is an error; the default run skips quietly.
    return 1 if args.sets and skipped else 0


if __name__ == "__main__":
    sys.exit(main())
