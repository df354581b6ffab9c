"""Benchmark: build a 200k-row corpus, against a json.loads-only pass over the same files.

    .venv/bin/python bench/corpus_build.py [--rows 200000] [--keep DIR]

Writes play logs (trm_play_root, 40 worlds, with noisy and broken rows), normalized JSONL and
router rows to a temporary folder, then times: the baseline (read every line and json.loads it,
nothing else), `build_corpus` as a dry run (read, validate, split, hash), and the full build
(plus writing every file). The target (SPEC §4 issue): 200k rows in under 30 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.schemas.corpus import CorpusSpec  # noqa: E402
from worker.corpus import build_corpus  # noqa: E402

TARGET_S = 30.0
KINDS = ["oracle"] * 8 + ["suboptimal", "recovery"]


def _trace(rng: random.Random, world: str, episode: int, turn: int) -> str:
    tools = [f"{world}.opt{k}" for k in range(rng.randint(3, 6))]
    roll = rng.random()
    label = f"PICK {rng.randrange(len(tools))}" if roll > 0.002 else f"PICK {len(tools)}"
    row = {
        "episode": episode,
        "turn": turn,
        "label": label,
        "event": {
            "encounter_id": f"{world}-e{episode}-{turn}",
            "next_encounter": f"{world}-e{episode}-{turn + 1}",
            "outcome": "ok",
            "metrics": {"desirability": round(rng.random(), 4)},
            "state": {
                "pos": [rng.randrange(20), rng.randrange(20)],
                "goal": [rng.randrange(20), rng.randrange(20)],
                "budget": rng.randrange(100),
                "seen": [rng.randrange(9) for _ in range(4)],
            },
            "kind": rng.choice(KINDS),
        },
        "latent": {"latent_norm": round(rng.uniform(0.5, 3.0), 4)},
        "reasoning_interpret_log": {
            "candidate_scores": [{"opt_id": t, "score": round(rng.random(), 3)} for t in tools]
        },
    }
    text = json.dumps(row)
    return text if roll > 0.001 else text[:-7]  # a few truncated lines: bad_json


def write_fixture(root: Path, rows: int, seed: int = 0) -> tuple[CorpusSpec, list[Path]]:
    rng = random.Random(seed)
    play_rows = rows * 8 // 10
    norm_rows = rows // 10
    router_rows = rows - play_rows - norm_rows
    worlds = [f"{fam}-w{i}" for fam in ("grid", "maze", "route", "sched") for i in range(10)]
    per_world = play_rows // len(worlds)
    files: list[Path] = []
    for w_index, world in enumerate(worlds):
        count = per_world + (play_rows - per_world * len(worlds) if w_index == 0 else 0)
        path = root / "play" / "worlds" / world / "trm_traces.jsonl"
        path.parent.mkdir(parents=True)
        lines = [_trace(rng, world, i // 25, i % 25) for i in range(count)]
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    norm = root / "normalized.jsonl"
    with norm.open("w") as handle:
        for i in range(norm_rows):
            tools = ["left", "right", "wait"]
            state = {"x": rng.randrange(50), "y": rng.randrange(50), "hp": rng.randrange(10)}
            meta = {"env": f"arena-{i % 7}", "run": f"r{i % 3}", "episode": i // 20}
            row = {"state": json.dumps(state), "tools": tools, "action": rng.choice(tools)}
            handle.write(json.dumps({**row, "meta": meta}) + "\n")
    files.append(norm)
    router = root / "router.jsonl"
    routes = ["math", "code", "chat", "search"]
    with router.open("w") as handle:
        for i in range(router_rows):
            output = {"route": rng.choice(routes), "intent": "ask", "prompt_family": f"f{i % 5}"}
            if rng.random() < 0.002:
                del output["route"]
            prompt = f"request {i} about {rng.choice(['sums', 'loops', 'news', 'recipes'])}"
            handle.write(json.dumps({"input": {"prompt_text": prompt}, "output": output}) + "\n")
    files.append(router)
    spec = CorpusSpec.model_validate(
        {
            "sources": [
                {"type": "trm_play_root", "name": "play", "path": str(root / "play")},
                {"type": "jsonl", "name": "normalized", "path": str(norm)},
                {"type": "router_jsonl", "name": "router", "path": str(router)},
            ],
            "split": {"anchor": ["grid-w9", "maze-w9"]},
        }
    )
    return spec, files


def baseline(files: list[Path]) -> int:
    count = 0
    for path in files:
        with path.open("rb") as handle:
            for line in handle:
                with contextlib.suppress(ValueError):
                    json.loads(line)
                count += 1
    return count


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, help="keep the fixture and corpus in this folder")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="corpus-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        gen_s, (spec, files) = timed(lambda: write_fixture(root / "logs", args.rows))
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        print(f"fixture: {args.rows} rows, {size_mb:.1f} MB in {len(files)} files ({gen_s:.1f} s)")
        base_s, lines = timed(lambda: baseline(files))
        dry_s, dry = timed(lambda: build_corpus(spec, root / "corpus", dry_run=True))
        full_s, full = timed(lambda: build_corpus(spec, root / "corpus"))
        assert dry.corpus_hash == full.corpus_hash
        rows = {
            "baseline": lines,
            "dry": dry.counters["rows_read"],
            "full": full.counters["rows_read"],
        }
        table = [
            ("json.loads only (baseline)", rows["baseline"], base_s),
            ("build_corpus dry_run", rows["dry"], dry_s),
            ("build_corpus (writes files)", rows["full"], full_s),
        ]
        print(f"\n{'step':<30}{'rows':>10}{'seconds':>10}{'rows/s':>12}{'x baseline':>12}")
        for name, count, seconds in table:
            rate, ratio = count / seconds, seconds / base_s
            print(f"{name:<30}{count:>10}{seconds:>10.2f}{rate:>12,.0f}{ratio:>12.1f}")
        c = full.counters
        print(
            f"\nkept {c['rows_kept']}  invalid {c['rows_invalid']}  duplicates {c['duplicates']}  "
            f"train {c['train']}  val {c['val']}  anchor {c['anchor']}  critic {c['critic']}"
        )
        verdict = "PASS" if full_s < TARGET_S else "FAIL"
        n = rows["full"]
        print(f"{verdict}: full build {full_s:.1f} s for {n} rows (target {TARGET_S:.0f} s)")
        return 0 if verdict == "PASS" else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
