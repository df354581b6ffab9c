"""Benchmark: a trained controller's decisions in process (`Controller.decide`, what the decision
process runs per call) against the bare model forward on rows encoded beforehand (the ceiling),
for a trm and a gbdt, one row per call and 64 rows per call, on routerBench rows; then over HTTP,
and the decision process's memory with many versions promoted.

    .venv/bin/python bench/decide.py [--rows N] [--threads N] [--epochs N] [--keep DIR] [--json F]
        [--http-seconds S] [--clients 1,50] [--block N] [--heap kept|default] [--versions 20]
        [--rounds 3] [--decide-workers N]

First, on every row: the decision-time encoder's matrices (worker/decide/fast_encode.py) against
the general encoder's, bit for bit, and the controller's action against the policy's own
(`scores_batch`); the bench stops on any difference. Then, same process, same rows, same models;
per trainer and batch size, taking turns on each call (the order rotating, so a change in the
machine's load hits them alike), or on each `--block` calls (a method's code and data then stay
in the CPU's caches from one call to the next, as in a process that only decides; taking turns
call by call, torch and the general encoder evict them):
- decide: `Controller.decide(rows)`: the rows checked, encoded, the forward, the probabilities and
  margins;
- forward: the model alone on the same rows encoded before the clock starts, by the forward the
  controller runs for that many rows (trm: the numpy forward up to NUMPY_ROWS, torch's
  `TinyRecursiveModel.infer` above; gbdt: `Booster.predict` on the raw matrix): the ceiling;
- numpy, torch (trm): both forwards on the same encoded rows, whichever the controller runs;
- encode: the decision-time encoder to the model's input as `decide` runs it (trm: scaled and
  padded; gbdt: only the columns its trees split on, the rest 0.0);
- general: the general encoder (`FeatureSpace.raw`/`.scaled`, worker/features/) to the same
  input: what the encoding cost before the decision-time encoder.
- http: over a real `trm decide-server` on loopback (its own process, a SQLite registry with the
  two models promoted as `bench-trm` and `bench-gbdt`), one row per request, from 1 and from 50
  clients at once (asyncio, one keep-alive connection each) for `--http-seconds` each:
  requests/s, p50/p99 of a request's round trip, and the clients' own CPU a request. The
  clients speak HTTP/1.1 on asyncio streams (`--http-client raw`, a few hundredths of a ms a
  request) or through httpx (`--http-client httpx`, several ms a request: on two shared cores
  the clients then take more CPU than the server). The clients run on the same CPU as the
  server, and send back to back: at 50 clients a request's p99 is at least 50 / (requests/s)
  (Little's law), printed as the HTTP row's ceiling.
- processes: `--decide-workers N` runs the server as `trm decide-server --workers N` (its CPU
  and memory are then the N processes' together).
- memory: `--versions` versions of one name (`bench-many`, the trm and the gbdt in turn) in the
  same registry, each decided `--rounds` times round-robin (pinned, `bench-many@k`): the
  process's resident memory at start, after the HTTP runs and after each round, and how many
  versions it holds loaded (at most TRM_DECIDE_CACHE, 8).
The last table is every target with its measured figure, the ceiling and whether it is met:
p50 <= 1 ms per decision at batch 1, >= 10,000 decisions/s at batch 64, decide within 2x of the
forward (wall time over all calls, and p50 against p50 of CPU time), an HTTP p99 <= 10 ms at 50
clients, and the memory not growing round after round (<= 50 MB between the first round and the
last).

The routerBench data is the shipped bench's (`specs/benches/routerbench.json`, generated from
its seed), built into a corpus as `specs/train-routerbench-trm.json` does; the models are trained
here first with the trainers' defaults (`--epochs` caps the trm's epochs: the forward's cost does
not depend on them), or reused from a `--keep` folder that holds them. The rows are the corpus's
anchor and val rows, cycled to `--rows`. torch and numpy's BLAS run on `--threads` threads (1
by default, as the trainer runs a model this small and the decision process runs them: on a
busy CPU more threads only wait for each other); glibc's malloc keeps its memory between calls as
the decision process has it (`worker/decide/heap.py`; `--heap default` leaves glibc's own).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.decide_http import http_bench, load_average  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 64)
TARGET_P50_MS = 1.0
TARGET_RATE = 10_000.0
TARGET_RATIO = 2.0
TARGET_HTTP_P99_MS = 10.0


def build_corpus_only(workdir: Path) -> Path:
    """The routerBench corpus (`workdir/corpus`), built as specs/train-routerbench-trm.json
    builds it from the shipped bench's data."""
    from core.schemas.corpus import CorpusSpec
    from worker.corpus import build_corpus
    from worker.envs.benchdata import ensure_bench_data

    folder = ensure_bench_data("routerbench", workdir / "data")
    spec = json.loads((ROOT / "specs" / "train-routerbench-trm.json").read_text())["corpus"]
    spec["sources"][0]["path"] = str(folder)
    build_corpus(CorpusSpec.model_validate(spec), workdir / "corpus")
    return workdir / "corpus"


def build(workdir: Path, epochs: int) -> tuple[Path, dict[str, Path]]:
    """The routerBench corpus and a trm and a gbdt trained on it: (corpus, trainer folders).
    A `--keep` folder that already holds them is used as it is."""
    from worker.train import gbdt, trm
    from worker.train.callbacks import TrainerCallbacks

    kept = [
        workdir / "corpus" / "anchor.jsonl",
        workdir / "trm" / "model.safetensors",
        workdir / "gbdt" / "model.txt",
    ]
    if all(f.is_file() for f in kept):
        print(f"  reusing the corpus and models in {workdir}", file=sys.stderr)
        return workdir / "corpus", {"trm": workdir / "trm", "gbdt": workdir / "gbdt"}
    build_corpus_only(workdir)
    trained = {}
    for name, trainer, config in (("trm", trm, {"epochs": epochs}), ("gbdt", gbdt, {})):
        started = time.perf_counter()
        trainer.train(config, workdir / "corpus", workdir / name, TrainerCallbacks(), seed=0)
        print(f"  trained {name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        trained[name] = workdir / name
    return workdir / "corpus", trained


def read_rows(corpus: Path, count: int) -> list[Any]:
    from worker.decide.controller import DecideRow
    from worker.models.rows import read_rows as read_split

    found = read_split(corpus / "anchor.jsonl") + read_split(corpus / "val.jsonl")
    rows = [DecideRow(r["state"], r["tools"]) for r in found]
    return [rows[i % len(rows)] for i in range(count)]


def methods(controller: Any, batch: int) -> dict[str, Callable[[list[Any]], Callable[[], Any]]]:
    """Per method, prepare(rows) -> a call that runs it on those rows (whatever is not timed
    done in prepare):
    - decide: `Controller.decide(rows)`, all of it;
    - forward: the model alone on the rows encoded beforehand, by the forward the controller
      runs for this many rows (a trm: numpy up to NUMPY_ROWS, torch above): the ceiling;
    - numpy / torch (a trm): each forward on the same rows, whichever the controller runs;
    - encode: the decision-time encoder (worker/decide/fast_encode.py), to the model's input
      as `decide` runs it (`Controller.decider`);
    - general: the general encoder (`FeatureSpace.raw`/`.scaled`, worker/features/) on the
      same rows to the same input: what a decision's encoding cost before."""
    import numpy as np
    import torch

    from worker.decide.controller import NUMPY_ROWS, pad_stacked

    policy, encoder, trainer = controller.policy, controller.decider, controller.trainer

    def fast(rows: list[Any]) -> Any:
        raw, counts = encoder.raw([(r.state, r.tools) for r in rows])
        if trainer == "gbdt":
            return raw
        return pad_stacked(encoder.scaled(raw), counts)

    def general(rows: list[Any]) -> Any:
        if trainer == "gbdt":
            return np.concatenate([policy.space.raw(r.state, r.tools) for r in rows])
        blocks = [policy.space.scaled(r.state, r.tools) for r in rows]
        return pad_stacked(np.concatenate(blocks), [len(b) for b in blocks])

    def numpy_forward(rows: list[Any]) -> Callable[[], Any]:
        x, mask = fast(rows)
        return lambda: controller.numpy.net.infer(x, mask)

    def torch_forward(rows: list[Any]) -> Callable[[], Any]:
        x, mask = (torch.from_numpy(a) for a in fast(rows))
        return lambda: policy.model.infer(x, mask, policy.steps)

    out: dict[str, Callable[[list[Any]], Callable[[], Any]]] = {
        "decide": lambda rows: lambda: controller.decide(rows),
        "encode": lambda rows: lambda: fast(rows),
        "general": lambda rows: lambda: general(rows),
    }
    if trainer == "gbdt":

        def lightgbm(rows: list[Any]) -> Callable[[], Any]:
            raw = fast(rows)
            return lambda: policy.booster.predict(raw, num_threads=1)

        out["forward"] = lightgbm
    else:
        use_numpy = controller.numpy is not None and batch <= NUMPY_ROWS
        out["forward"] = numpy_forward if use_numpy else torch_forward
        if controller.numpy is not None:
            out["numpy"] = numpy_forward
        out["torch"] = torch_forward
    return out


def measure(controller: Any, rows: list[Any], batch: int, block: int = 1) -> dict[str, Any]:
    from worker.decide.controller import NUMPY_ROWS

    prepare = methods(controller, batch)
    calls = [rows[i : i + batch] for i in range(0, len(rows) - batch + 1, batch)]
    ready = {name: [make(call) for call in calls] for name, make in prepare.items()}
    for runs in ready.values():  # warm-up
        runs[0]()
    seconds: dict[str, list[float]] = {name: [] for name in ready}
    cpu: dict[str, list[float]] = {name: [] for name in ready}
    names = list(ready)
    # `block` calls of a method in a row, then the next method's on the same calls: 1 takes
    # turns call by call; more keeps a method's code and data in the CPU's caches as a process
    # that only decides keeps them (the other methods, torch's and the general encoder's above
    # all, evict them).
    for first in range(0, len(calls), block):
        turn = first // block % len(names)
        for name in names[turn:] + names[:turn]:
            for k in range(first, min(first + block, len(calls))):
                started, started_cpu = time.perf_counter(), time.process_time()
                ready[name][k]()
                cpu[name].append(time.process_time() - started_cpu)
                seconds[name].append(time.perf_counter() - started)
    trm_numpy = controller.trainer == "trm" and controller.numpy is not None and batch <= NUMPY_ROWS
    out: dict[str, Any] = {
        "trainer": controller.trainer,
        "batch": batch,
        "calls": len(calls),
        "forward_by": "lightgbm"
        if controller.trainer == "gbdt"
        else "numpy"
        if trm_numpy
        else "torch",
    }
    for name, spent in seconds.items():
        per = sorted(s / batch * 1000 for s in spent)
        out[name] = {
            "per_s": round(len(calls) * batch / sum(spent), 1),
            "p50_ms": round(statistics.median(per), 4),
            "p99_ms": round(per[min(len(per) - 1, int(0.99 * len(per)))], 4),
            # The CPU this process spent (all its threads): on a CPU shared with other work a
            # call's wall time also holds the time it waited for a core.
            "cpu_p50_ms": round(statistics.median(c / batch * 1000 for c in cpu[name]), 4),
        }
    out["ratio"] = round(out["forward"]["per_s"] / out["decide"]["per_s"], 2)
    out["cpu_ratio"] = round(out["decide"]["cpu_p50_ms"] / out["forward"]["cpu_p50_ms"], 2)
    return out


def same_answers(controller: Any, rows: list[Any]) -> str:
    """The decision-time encoder's matrices against the general encoder's on every row (bit for
    bit) and the controller's actions against the policy's own (`scores_batch`)."""
    import numpy as np

    from worker.models.policy import argmax

    space, encoder = controller.policy.space, controller.encoder
    raw, _ = encoder.raw([(r.state, r.tools) for r in rows])
    general = np.concatenate([space.raw(r.state, r.tools) for r in rows])
    if not np.array_equal(raw, general, equal_nan=True):
        raise SystemExit(f"{controller.trainer}: the decision-time encoder's matrices differ")
    want = controller.policy.scores_batch([r.state for r in rows], [r.tools for r in rows])
    got = [d.action for k in range(len(rows)) for d in controller.decide([rows[k]])]
    differ = sum(a != r.tools[argmax(s)] for a, r, s in zip(got, rows, want, strict=True))
    if differ:
        raise SystemExit(f"{controller.trainer}: {differ} rows decided otherwise than the policy")
    return (
        f"{controller.trainer}: the same matrices as the general encoder on {len(rows)} rows, "
        f"the policy's action on every one (one row a call)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=512, help="rows decided per batch size")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--epochs", type=int, default=3, help="the trm's training epochs")
    parser.add_argument("--keep", type=Path, help="keep the data and models here (reused)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--http-seconds",
        type=float,
        default=10.0,
        help="seconds of requests per trainer and client count (0: no HTTP)",
    )
    parser.add_argument("--clients", default="1,50", help="concurrent HTTP clients, each a row")
    parser.add_argument(
        "--http-client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: HTTP/1.1 on asyncio streams (little client CPU); httpx: an AsyncClient each",
    )
    parser.add_argument(
        "--block",
        type=int,
        default=1,
        help="calls of a method in a row before the next method's (1: turn by turn)",
    )
    parser.add_argument(
        "--heap",
        choices=("kept", "default"),
        default="kept",
        help="kept: glibc's malloc keeps its memory as the decision process has it "
        "(worker/decide/heap.py); default: glibc's own thresholds",
    )
    parser.add_argument(
        "--decide-workers",
        type=int,
        default=1,
        help="the decision processes `trm decide-server --workers` runs on its port (default 1)",
    )
    parser.add_argument("--versions", type=int, default=20, help="versions for the memory check")
    parser.add_argument("--rounds", type=int, default=3, help="round-robin passes over them")
    args = parser.parse_args()
    import torch

    from worker.decide.controller import load_controller

    torch.set_num_threads(args.threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.threads)  # numpy's BLAS as the decision process runs it
    if args.heap == "kept":  # glibc's malloc as the decision process sets it
        from worker.decide.heap import keep_heap

        keep_heap()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="trm-decide-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, trained = build(workdir, args.epochs)
    rows = read_rows(corpus, args.rows)
    mean_tools = sum(len(r.tools) for r in rows) / len(rows)
    mean_chars = sum(len(r.state) for r in rows) / len(rows)
    print(
        f"{len(rows)} routerBench rows, {mean_tools:.1f} candidates and {mean_chars:.0f} "
        f"state characters a row; torch threads {args.threads}; {args.block} calls of a method "
        f"in a row; heap {args.heap}"
    )
    controllers = {t: load_controller(folder, t) for t, folder in trained.items()}
    for controller in controllers.values():
        print(same_answers(controller, rows))
    results = []
    print(
        f"\n{'trainer':>7} {'batch':>5} | {'decide/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'cpu p50':>7} | "
        f"{'forward/s':>9} {'p50 ms':>7} {'by':>8} | {'encode':>7} {'general':>7} | "
        f"{'numpy':>7} {'torch':>7} | {'ratio':>5}"
    )
    for trainer, controller in controllers.items():
        for batch in BATCHES:
            r = measure(controller, rows, batch, args.block)
            results.append(r)
            d, f = r["decide"], r["forward"]
            cells = [
                f"{r[m]['p50_ms']:>7.3f}" if m in r else f"{'-':>7}"
                for m in ("encode", "general", "numpy", "torch")
            ]
            print(
                f"{trainer:>7} {batch:>5} | {d['per_s']:>9.0f} {d['p50_ms']:>7.3f} "
                f"{d['p99_ms']:>7.3f} {d['cpu_p50_ms']:>7.3f} | {f['per_s']:>9.0f} "
                f"{f['p50_ms']:>7.3f} "
                f"{r['forward_by']:>8} | {cells[0]} {cells[1]} | {cells[2]} {cells[3]} | "
                f"{r['ratio']:>5.1f}"
            )
    print(
        "(ms a decision, p50 of wall time; cpu p50: of this process's CPU time; encode: the "
        "decision-time encoder, general: the general one on the same rows; ratio: decide time "
        f"/ forward time; load average {load_average()})"
    )
    methods_cpu = ("decide", "forward", "encode", "general", "numpy", "torch")
    print(
        f"\nCPU time p50, ms a decision\n{'trainer':>7} {'batch':>5} | "
        + " ".join(f"{m:>8}" for m in methods_cpu)
    )
    for r in results:
        print(
            f"{r['trainer']:>7} {r['batch']:>5} | "
            + " ".join(
                f"{r[m]['cpu_p50_ms']:>8.3f}" if m in r else f"{'-':>8}" for m in methods_cpu
            )
        )
    http: list[dict[str, Any]] = []
    memory: dict[str, Any] = {}
    if args.http_seconds > 0:
        clients = [int(c) for c in args.clients.split(",")]
        http, memory = http_bench(
            workdir,
            trained,
            rows,
            args.http_seconds,
            clients,
            args.versions,
            args.rounds,
            args.http_client,
            args.decide_workers,
        )
        print(
            f"\n{'trainer':>7} {'clients':>7} | {'requests/s':>10} {'p50 ms':>7} {'p99 ms':>7} | "
            f"CPU ms a request: clients ({args.http_client}), decision process"
        )
        for h in http:
            print(
                f"{h['trainer']:>7} {h['clients']:>7} | {h['per_s']:>10.0f} "
                f"{h['p50_ms']:>7.2f} {h['p99_ms']:>7.2f} | {h['client_cpu_ms']:.3f} "
                f"{h['server_cpu_ms']:.3f}"
            )
        if memory:
            print(
                f"\ndecision process RSS: {memory['start_mb']} MiB at start, "
                f"{memory['after_http_mb']} after the HTTP runs; {memory.get('versions', 0)} "
                f"versions decided round-robin: {memory.get('rounds_mb')} MiB after each round, "
                f"{memory.get('loaded')} loaded at the end"
            )
    print("\n" + targets(results, http, memory))
    if args.json:
        out = {"in_process": results, "http": http, "memory": memory}
        args.json.write_text(json.dumps(out, indent=2))
    return 0


def targets(results: list[dict[str, Any]], http: list[dict[str, Any]], memory: Any) -> str:
    """Every target with its measured figure and the bare forward's ceiling, met or not."""
    lines = [f"{'target':<52} {'measured':>12} {'ceiling':>12}  met"]

    def row(what: str, value: float, unit: str, ceiling: str, met: bool) -> None:
        lines.append(f"{what:<52} {value:>9.3f} {unit:<2} {ceiling:>12}  {'yes' if met else 'NO'}")

    for r in results:
        d, f, t, b = r["decide"], r["forward"], r["trainer"], r["batch"]
        if b == 1:
            row(
                f"{t} p50 a decision at 1 row <= {TARGET_P50_MS} ms",
                d["p50_ms"],
                "ms",
                f"{f['p50_ms']:.3f} ms",
                d["p50_ms"] <= TARGET_P50_MS,
            )
            row(
                f"{t} the same, in CPU time (waits for a core out)",
                d["cpu_p50_ms"],
                "ms",
                f"{f['cpu_p50_ms']:.3f} ms",
                d["cpu_p50_ms"] <= TARGET_P50_MS,
            )
        else:
            row(
                f"{t} decisions/s at {b} rows >= {TARGET_RATE:.0f}",
                d["per_s"],
                "/s",
                f"{f['per_s']:.0f}/s",
                d["per_s"] >= TARGET_RATE,
            )
            row(
                f"{t} the same, in CPU time (waits for a core out)",
                1000 / d["cpu_p50_ms"],
                "/s",
                f"{1000 / f['cpu_p50_ms']:.0f}/s",
                1000 / d["cpu_p50_ms"] >= TARGET_RATE,
            )
        row(
            f"{t} decide/forward at {b} rows <= {TARGET_RATIO}",
            r["ratio"],
            "x",
            "1.0 x",
            r["ratio"] <= TARGET_RATIO,
        )
        row(
            f"{t} the same, in CPU time (p50 against p50)",
            r["cpu_ratio"],
            "x",
            "1.0 x",
            r["cpu_ratio"] <= TARGET_RATIO,
        )
    for h in http:
        if h["clients"] >= 50:
            # Clients that send back to back: p99 >= clients / (requests/s) (Little's law).
            bound = h["clients"] / h["per_s"] * 1000 if h["per_s"] else float("inf")
            row(
                f"{h['trainer']} HTTP p99 at {h['clients']} clients <= {TARGET_HTTP_P99_MS:.0f} ms",
                h["p99_ms"],
                "ms",
                f">={bound:.1f} ms",
                h["p99_ms"] <= TARGET_HTTP_P99_MS,
            )
    if memory.get("rounds_mb"):
        grown = memory["rounds_mb"][-1] - memory["rounds_mb"][0]
        row(
            f"RSS growth over {len(memory['rounds_mb'])} rounds of {memory['versions']} versions",
            grown,
            "MB",
            f"{memory['loaded']} loaded",
            grown <= 50,
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
