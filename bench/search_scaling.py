"""Benchmark: candidates per hour of the smoke search with 1, 2 and 4 workers (CPU, `trm`).

    .venv/bin/python bench/search_scaling.py [--workers 1,2,4] [--candidates 4] [--spec FILE]

Each round starts N real worker processes (`trm worker --queues gpu,cpu`) on one SQLite database
and one Redis, submits `specs/hillclimb-smoke.json` with `parallelism=N` and a fixed candidate
count (patience high, so every round runs the same number), and times the search run from its
start to its end. Speed-up = rate(N) / rate(1); the target is >= 0.8 x N up to the machine's cores.
The full smoke spec as shipped is also run once with 2 workers: its best candidate's anchor score
must beat the first candidate's by more than the noise margin.

The workers run in a scratch environment of the tests' service stack (tests/stack.py); the search
is submitted from this process, as the API would.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stack import Scratch, Stack, create_database  # noqa: E402

SPEC = ROOT / "specs" / "hillclimb-smoke.json"
REDIS_URL = os.environ.get("TRM_TEST_REDIS_URL", "redis://127.0.0.1:6379/12")
TARGET = 0.8


def run_search(workdir: Path, workers: int, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Start `workers` workers, run one search to its end, and report what it did."""
    from sqlmodel import Session

    from core.db import make_engine
    from core.events import Publisher
    from core.models import Run
    from core.redisconn import sync_redis
    from core.runs import submit_run

    base = workdir / f"w{workers}-{uuid.uuid4().hex[:6]}"
    scratch = Scratch(
        base,
        create_database("sqlite", base),
        prefix="bench",
        redis_url=REDIS_URL,
        data_dir=workdir / "data",  # the bench data, generated once for every round
        model_cache=workdir / "models",
    )
    scratch.migrate()
    stack = Stack({**scratch.env, "TRM_HEARTBEAT_S": "1", "TRM_REQUEUE_AFTER_S": "2"}, base)
    settings = stack.settings
    engine = make_engine(settings.database_url)
    publisher = Publisher(engine, sync_redis(settings), settings)
    for _ in range(workers):
        stack.start_worker(queues="gpu,cpu")
    try:
        run, _ = submit_run(publisher, settings, spec, None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with Session(engine) as session:
                fresh = session.get(Run, run.id)
                assert fresh is not None
                if fresh.terminal:
                    break
            time.sleep(0.5)
        else:
            raise SystemExit(f"search {run.id} did not end in {timeout} s (logs in {base})")
        run_dir = settings.run_dir(run.id)
        summary_path = run_dir / "search_summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        rows = [json.loads(line) for line in (run_dir / "hillclimb_ledger.jsonl").open()]
        finished = [r for r in rows if r["event"] == "finished"]
        wall = (fresh.finished_at - fresh.started_at).total_seconds()  # type: ignore[operator]
        return {
            "workers": workers,
            "status": fresh.status,
            "failure": fresh.failure_reason,
            "candidates": len(finished),
            "completed": sum(1 for r in finished if r["status"] == "completed"),
            "wall_s": round(wall, 1),
            "per_hour": round(len(finished) / wall * 3600, 1) if wall else None,
            "summary": summary,
            "ledger": finished,
            "overlap": _max_overlap(finished),
            "logs": str(base),
        }
    finally:
        stack.stop()
        scratch.drop()
        engine.dispose()


def _max_overlap(rows: list[dict[str, Any]]) -> int:
    """Most candidates running at one moment (from the ledger's started_at/finished_at)."""
    points = []
    for row in rows:
        if row.get("started_at") and row.get("finished_at"):
            points += [(row["started_at"], 1), (row["finished_at"], -1)]
    level = peak = 0
    for _, step in sorted(points, key=lambda p: (p[0], p[1])):
        level += step
        peak = max(peak, level)
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--candidates", type=int, default=4, help="per scaling round")
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--skip-smoke", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep run folders here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    from worker.envs.benchdata import ensure_bench_data

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="trm-search-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ensure_bench_data("routerbench", workdir / "data")  # generated once, outside the timing
    shipped = json.loads(args.spec.read_text())
    cores = os.cpu_count() or 1
    results: dict[str, Any] = {"cores": cores, "rounds": []}

    if not args.skip_smoke:
        smoke = run_search(workdir, 2, shipped, args.timeout)
        s = smoke["summary"]
        best = (s.get("best_scores") or {}).get("anchor_score")
        root = (s.get("root_scores") or {}).get("anchor_score")
        margin = shipped.get("noise_margin", 0.01)
        beats = best is not None and root is not None and best - root > margin
        results["smoke"] = {k: v for k, v in smoke.items() if k != "ledger"}
        results["smoke"].update(root_anchor=root, best_anchor=best, beats_root=beats)
        print(
            f"smoke search, 2 workers: {smoke['status']} in {smoke['wall_s']} s, "
            f"{smoke['candidates']} candidates ({smoke['completed']} completed), "
            f"max {smoke['overlap']} at once"
        )
        print(
            f"  first candidate anchor {root}  best ({s.get('best_candidate')}) anchor {best}  "
            f"margin {margin}: {'PASS' if beats else 'FAIL'}"
        )
        for row in smoke["ledger"]:
            print(
                f"  {row['candidate_id']} rung {row['rung']} {row['status']:9} "
                f"anchor {row['anchor_score']} gap {row['generalization_gap']} "
                f"{row['decision']}: {row['reason']}"
            )

    baseline = None
    print(
        f"\n{'workers':>7} {'cands':>5} {'wall s':>7} {'cands/h':>8} {'speed-up':>8} "
        f"{'target':>7} {'peak':>4}"
    )
    for workers in [int(w) for w in args.workers.split(",")]:
        spec = {**shipped, "parallelism": workers, "max_candidates": args.candidates}
        spec["patience"] = args.candidates + 1
        found = run_search(workdir, workers, spec, args.timeout)
        rate = found["per_hour"] or 0.0
        baseline = baseline or rate
        speedup = rate / baseline if baseline else 0.0
        target = TARGET * workers if workers <= cores else None
        ok = target is None or speedup >= target
        found.update(speedup=round(speedup, 2), target=target, ok=ok)
        results["rounds"].append({k: v for k, v in found.items() if k not in ("ledger", "summary")})
        print(
            f"{workers:>7} {found['candidates']:>5} {found['wall_s']:>7} {rate:>8} "
            f"{speedup:>8.2f} {(f'>= {target:.1f}') if target else 'n/a':>7} "
            f"{found['overlap']:>4}{'' if ok else '  BELOW TARGET'}"
        )
    print(f"(machine cores: {cores}; targets apply up to that many workers)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
