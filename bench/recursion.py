"""Benchmark: does recursion pay where one step fails? The whole-answer trm against its ablations.

    .venv/bin/python bench/recursion.py [--quick] [--families maze,sudoku] [--seeds 0,1,2]
        [--seconds 600] [--cpu-seconds 900] [--steps N] [--jobs 2] [--json FILE]

Per puzzle family x variant x seed, one model is trained (worker/train/trm_grid.py) on a
generated set and scored on held-out puzzles of the same kind:

- `recursive`: the paper's recursion, n = 6 latent updates per answer update, T = 3 cycles (two
  gradient-free), up to N_sup = 16 deeply supervised steps, full backprop through the last cycle
  (mazes: a lighter n = 3, T = 2, N_sup = 4 at lr 5e-4, which learns at CPU scale where the
  paper's does not);
- `one_step_grad`: the same, back-propagating through the last latent and answer updates only;
- `one_step`: the same network with n = T = N_sup = 1 (direct prediction);
- `one_step_mlp`: direct prediction with the MLP mixer, which sees every cell in one pass: where
  the family's network is local (the maze's convolution), the strongest one-step model.

The first three are the same network, so the same parameters; each trains for at most
`--seconds` of wall time, `--cpu-seconds` of its process's CPU time (one thread; unlike wall time
not shrunk by other work on the machine) and `--steps`; its train seconds, CPU seconds and steps
are reported beside its accuracy, since a recursive step costs (n + 1) x T network passes where a
one-step step costs two. Figures: exact-answer accuracy (the whole grid right; mean over seeds, a
95% Wilson interval over all seeds' test puzzles, the spread as the standard deviation over
seeds), per-cell accuracy on the cells the puzzle leaves open, exact after k supervision steps at
inference, and the learning curve (val exact accuracy against steps, mean over seeds). The
paper's figures are printed beside, as a reference at another scale.

The CPU sets (`--quick` smaller and shorter): maze 11x11, carved, walls on 45% of the cells, a
unique shortest path of >= 30 moves (mean 36: over three times the side), the network's mixer a
3x3 convolution (one pass moves information two cells, so the path has to be found by repeating
it); sudoku 6x6 dug to its fewest givens (about 10), the MLP mixer. The paper's scale is
`specs/puzzles/*.json` for a GPU worker.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.schemas.puzzles import GridTrainerConfig  # noqa: E402
from worker.puzzles import MazeParams, Params, PuzzleSet, SudokuParams, generate_set  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "recursive": {"n_recursions": 6, "cycles": 3, "supervision_steps": 16, "gradient": "full"},
    "one_step_grad": {
        "n_recursions": 6,
        "cycles": 3,
        "supervision_steps": 16,
        "gradient": "one_step",
    },
    "one_step": {"n_recursions": 1, "cycles": 1, "supervision_steps": 1, "gradient": "full"},
    # The one-step model with the mixer that sees every cell in one pass (an MLP along the
    # cells): the strongest direct predictor, whatever the family's own mixer.
    "one_step_mlp": {
        "n_recursions": 1,
        "cycles": 1,
        "supervision_steps": 1,
        "gradient": "full",
        "mixer": "mlp",
    },
}
ONE_STEP = ("one_step", "one_step_mlp")
# Jolicoeur-Martineau 2025, exact accuracy on the test set (Tables 1, 4, 5): 1k training
# puzzles with heavy augmentation, 5M (MLP) / 7M (attention) parameters, on GPUs.
PAPER = {
    "sudoku": {
        "recursive": 87.4,
        "one_step_grad": 56.5,
        "one_step": 0.0,
        "where": "Sudoku-Extreme 9x9, MLP mixer 5M",
    },
    "maze": {
        "recursive": 85.3,
        "one_step_grad": None,
        "one_step": 0.0,
        "where": "Maze-Hard 30x30 (path > 110), attention 7M",
    },
}
FAMILIES: dict[str, dict[str, Any]] = {
    # Carved 11x11 mazes whose unique shortest path is >= 30 moves (about 3x the side), the
    # network a local 3x3 convolution: one pass moves information two cells, so the path must
    # be found by recursion; a lighter recursion (n=3, T=2, N_sup=4) than the paper's, at half
    # the default learning rate (at 1e-3 every seed peaked, then fell).
    "maze": {
        "params": MazeParams(11, 0.45, 30, "carved"),
        "trainer": {"mixer": "conv"},
        "recursive": {"n_recursions": 3, "cycles": 2, "supervision_steps": 4, "lr": 5e-4},
    },
    "sudoku": {"params": SudokuParams(6, 10, "any"), "trainer": {"mixer": "mlp"}},
}
PARAMS = {"maze": MazeParams, "sudoku": SudokuParams}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def wilson(right: int, total: int, z: float = 1.96) -> tuple[float, float]:
    if total == 0:
        return 0.0, 0.0
    p = right / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Train one variant on one seed (in a worker process: one thread) and score it."""
    import torch

    from worker.train.callbacks import TrainerCallbacks
    from worker.train.trm_grid import exact_by_step, score, train

    class Curve(TrainerCallbacks):
        """Prints each val point as it comes: a cut-short bench still shows its curves. Stops
        the training once this process has used `cpu_seconds` of CPU (a budget that other
        work on the machine does not shrink, unlike wall time)."""

        def should_stop(self) -> str | None:
            limit = job.get("cpu_seconds")
            if limit is not None and time.process_time() - began > limit:
                return "cpu_seconds"
            return None

        def on_eval(self, step: int, **metrics: Any) -> None:
            print(
                f"    {job['family']} {job['variant']} seed {job['seed']} step {step}: "
                f"val exact {metrics['val_exact']:.3f} cells {metrics['val_cells']:.3f} "
                f"({metrics['seconds']:.0f} s)",
                flush=True,
            )

    torch.set_num_threads(1)
    config = GridTrainerConfig(**job["config"])
    train_set, val_set, test_set = job["train"], job["val"], job["test"]
    began = time.process_time()
    model, result = train(
        config,
        train_set,
        val_set,
        Curve(),
        seed=job["seed"],
        max_seconds=job["seconds"],
        device=job["device"],
    )
    cpu = time.process_time() - began
    final = score(model, test_set)
    halted = score(model, test_set, halting=True)
    by_step = exact_by_step(model, test_set)
    return {
        "family": job["family"],
        "variant": job["variant"],
        "seed": job["seed"],
        "exact": final.exact,
        "cells": final.cells,
        "right": round(final.exact * final.puzzles),
        "puzzles": final.puzzles,
        "halting_exact": halted.exact,
        "halting_steps": halted.steps,
        "steps": result.steps,
        "train_seconds": result.train_seconds,
        "cpu_seconds": round(cpu, 1),
        "eval_seconds": result.eval_seconds,
        "parameters": result.parameters,
        "best_step": result.best_step,
        "curve": [asdict(p) for p in result.curve],
        "exact_by_step": by_step,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    exact = [r["exact"] for r in rows]
    right, total = sum(r["right"] for r in rows), sum(r["puzzles"] for r in rows)
    low, high = wilson(right, total)
    curve: dict[int, list[float]] = {}
    for r in rows:
        for p in r["curve"]:
            curve.setdefault(p["step"], []).append(p["exact"])
    return {
        "exact": statistics.mean(exact),
        "interval": (low, high),
        "spread": statistics.pstdev(exact) if len(exact) > 1 else 0.0,
        "cells": statistics.mean(r["cells"] for r in rows),
        "halting_steps": statistics.mean(r["halting_steps"] for r in rows),
        "seconds": statistics.mean(r["train_seconds"] for r in rows),
        "cpu_seconds": statistics.mean(r["cpu_seconds"] for r in rows),
        "eval_seconds": statistics.mean(r["eval_seconds"] for r in rows),
        "steps": statistics.mean(r["steps"] for r in rows),
        "parameters": rows[0]["parameters"],
        "seeds": len(rows),
        "curve": {s: statistics.mean(v) for s, v in sorted(curve.items()) if len(v) == len(rows)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sets, 60 s a model")
    parser.add_argument("--families", default="maze,sudoku")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--seconds", type=float, default=600, help="train time cap per model")
    parser.add_argument("--steps", type=int, default=20000, help="step cap per model")
    parser.add_argument(
        "--cpu-seconds",
        type=float,
        help="CPU time cap per model (one thread each), the same whatever else the machine runs",
    )
    parser.add_argument("--train", type=int, default=1000, help="train puzzles per family")
    parser.add_argument("--test", type=int, default=200, help="test (and val) puzzles")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2, help="models trained at once")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--config", type=Path, help="a puzzle config (specs/puzzles/*.json)")
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu")
    parser.add_argument(
        "--recursive-knobs",
        type=json.loads,
        default={},
        help='JSON merged into the recursive variants (not one_step): {"supervision_steps": 4}',
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.train, args.test = min(args.seconds, 60), 300, 64
    families = FAMILIES
    if args.config:  # one family at the config's sizes
        spec = json.loads(args.config.read_text())
        family = spec["family"]
        params = PARAMS[family](**spec["params"])
        families = {
            family: {
                "params": params,
                "trainer": spec["trainer"],
                "recursive": spec.get("recursive", {}),
            }
        }
        args.families, args.train, args.test = family, spec["train"], spec["test"]
        args.seconds = spec.get("seconds") or args.seconds
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = []
    started = time.perf_counter()
    for family in args.families.split(","):
        params: Params = families[family]["params"]
        made = generate_set(family, params, args.train + 2 * args.test, seed=0, jobs=args.jobs)
        train_set: PuzzleSet = made.take(slice(0, args.train))
        val_set = made.take(slice(args.train, args.train + args.test))
        test_set = made.take(slice(args.train + args.test, None))
        print(
            f"{family}: {params}, {len(train_set)} train / {len(val_set)} val / "
            f"{len(test_set)} test puzzles ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        for variant in args.variants.split(","):
            config = {
                "hidden": args.hidden,
                "batch_size": args.batch,
                "max_steps": args.steps,
                "eval_every": args.eval_every,
                "eval_puzzles": args.test,
                **families[family]["trainer"],
                **VARIANTS[variant],
                **(families[family].get("recursive", {}) if variant not in ONE_STEP else {}),
                **(args.recursive_knobs if variant not in ONE_STEP else {}),
            }
            for seed in seeds:
                jobs.append(
                    {
                        "family": family,
                        "variant": variant,
                        "seed": seed,
                        "config": config,
                        "train": train_set,
                        "val": val_set,
                        "test": test_set,
                        "seconds": args.seconds,
                        "cpu_seconds": args.cpu_seconds,
                        "device": args.device,
                    }
                )
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = []
        for row in pool.map(run_one, jobs):
            rows.append(row)
            print(
                f"  {row['family']:7s} {row['variant']:14s} seed {row['seed']}: exact "
                f"{row['exact']:.3f} cells {row['cells']:.3f} steps {row['steps']} "
                f"{row['train_seconds']:.0f} s ({row['cpu_seconds']:.0f} s CPU)",
                flush=True,
            )
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "results": {}}
    print(
        f"\nexact-answer accuracy (mean over {len(seeds)} seeds, 95% Wilson interval over "
        "their test puzzles, seed spread = std), per-cell accuracy on open cells; halt: mean "
        "supervision steps with halting; secs: train wall time, (eval) the val points' share; "
        "cpu: train CPU seconds"
    )
    for family in args.families.split(","):
        paper = PAPER[family]
        print(f"\n{family}  (paper, another scale: {paper['where']})")
        print(
            f"  {'variant':14s} {'exact':>6s} {'95% interval':>15s} {'spread':>7s} "
            f"{'cells':>6s} {'halt':>5s} {'steps':>6s} {'secs':>6s} {'(eval)':>6s} {'cpu':>6s} "
            f"{'params':>7s} paper"
        )
        for variant in args.variants.split(","):
            mine = [r for r in rows if r["family"] == family and r["variant"] == variant]
            s = summarize(mine)
            report["results"].setdefault(family, {})[variant] = {**s, "runs": mine}
            ref = paper.get(variant)
            print(
                f"  {variant:14s} {s['exact']:6.3f} [{s['interval'][0]:.3f}, "
                f"{s['interval'][1]:.3f}] {s['spread']:7.3f} {s['cells']:6.3f} "
                f"{s['halting_steps']:5.1f} {s['steps']:6.0f} {s['seconds']:6.0f} "
                f"{s['eval_seconds']:6.0f} {s['cpu_seconds']:6.0f} "
                f"{s['parameters']:7d} {'-' if ref is None else f'{ref:.1f}%'}"
            )
        print("  exact after k supervision steps at inference (mean over seeds), k = 1 2 4 8 16:")
        for variant in args.variants.split(","):
            runs = report["results"][family][variant]["runs"]
            by_step = [
                statistics.mean(r["exact_by_step"][k - 1] for r in runs)
                for k in (1, 2, 4, 8, 16)
                if k <= len(runs[0]["exact_by_step"])
            ]
            print(f"    {variant:14s} " + " ".join(f"{v:.3f}" for v in by_step))
        print("  learning curve (val exact, mean over seeds) by step:")
        for variant in args.variants.split(","):
            curve = report["results"][family][variant]["curve"]
            points = " ".join(
                f"{k}:{v:.2f}" for k, v in list(curve.items())[:: max(1, len(curve) // 12)]
            )
            print(f"    {variant:14s} {points}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
