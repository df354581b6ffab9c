"""Benchmark: a trained controller's decisions in process (`Controller.decide`, what the decision
process runs per call) against the bare model forward on rows encoded beforehand (the ceiling),
for a trm and a gbdt, one row per call and 64 rows per call, on routerBench rows.

    .venv/bin/python bench/decide.py [--rows N] [--threads N] [--epochs N] [--keep DIR] [--json F]
        [--http-seconds S] [--clients 1,50]

Same process, same rows, same models; per trainer and batch size:
- decide: `Controller.decide(rows)`: the rows checked, encoded (worker/features through the
  feature space), the forward, the probabilities and margins;
- forward: the model alone on the same rows encoded before the clock starts, by the forward the
  controller runs for that many rows (trm: the numpy forward on the padded batch up to
  NUMPY_ROWS, `TinyRecursiveModel.infer` above; gbdt: `Booster.predict` on the raw matrix);
- encode: the encoding alone (trm: the scaled matrices padded, or `Encoded` and its batch
  tensors for torch; gbdt: the raw matrix), to show where decide's time beyond the forward goes.
- http: over a real `trm decide-server` on loopback (its own process, a SQLite registry with the
  two models promoted as `bench-trm` and `bench-gbdt`), one row per request, from 1 and from 50
  clients at once (asyncio, one connection each) for `--http-seconds` each: requests/s and
  p50/p99 of a request's round trip. The clients run on the same CPU as the server.
The table shows decisions/s and p50/p99 per decision (one row per call: the call; 64 per call:
the call's time / 64) and decide / forward, the encoding and overhead ratio. Targets: p50 <= 1 ms
per decision at batch 1, >= 10,000 decisions/s at batch 64, decide within 2x of the forward,
an HTTP p99 <= 10 ms at 50 clients.

The routerBench data is the shipped bench's (`specs/benches/routerbench.json`, generated from
its seed), built into a corpus as `specs/train-routerbench-trm.json` does; the models are trained
here first with the trainers' defaults (`--epochs` caps the trm's epochs: the forward's cost does
not depend on them). The rows are the corpus's anchor and val rows, cycled to `--rows`. The
methods take turns on each call (the order rotating), so a change in the machine's load hits
them alike. torch runs on `--threads` threads (1 by default, as the trainer runs a model this
small: on a busy CPU more threads only wait for each other).
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
    """The routerBench corpus and a trm and a gbdt trained on it: (corpus, trainer folders)."""
    from worker.train import gbdt, trm
    from worker.train.callbacks import TrainerCallbacks

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


def methods(trainer: str, folder: Path, batch: int) -> tuple[
    Any, Callable[[list[Any]], Callable[[], Any]], Callable[[list[Any]], Any], str
]:  # fmt: skip
    """(the controller, forward(rows) -> a call of the model alone on those rows encoded now,
    encode(rows), the forward's name): the forward the controller runs for calls of `batch`
    rows (a trm: numpy up to NUMPY_ROWS, torch above)."""
    import torch

    from worker.decide.controller import NUMPY_ROWS, load_controller
    from worker.decide.numpy_trm import pad
    from worker.models.gbdt import matrix
    from worker.models.trm import Encoded

    controller = load_controller(folder, trainer)
    policy = controller.policy
    use_numpy = controller.numpy is not None and batch <= NUMPY_ROWS

    def encode(rows: list[Any]) -> Any:
        dicts = [{"state": r.state, "tools": r.tools} for r in rows]
        if trainer == "gbdt":
            return matrix(policy.space, dicts)[0]
        if use_numpy:
            return pad([policy.space.scaled(r.state, r.tools) for r in rows], policy.space.width)
        data = Encoded(policy.space, dicts)
        return data.batch(torch.arange(len(data)), policy.device)

    def forward(rows: list[Any]) -> Callable[[], Any]:
        encoded = encode(rows)
        if trainer == "gbdt":
            return lambda: policy.booster.predict(encoded, num_threads=1)
        if use_numpy:
            return lambda: controller.numpy.net.infer(*encoded)
        return lambda: policy.model.infer(encoded["x"], encoded["mask"], policy.steps)

    name = "lightgbm" if trainer == "gbdt" else "numpy" if use_numpy else "torch"
    return controller, forward, encode, name


def measure(trainer: str, folder: Path, rows: list[Any], batch: int) -> dict[str, Any]:
    controller, forward, encode, forward_name = methods(trainer, folder, batch)
    calls = [rows[i : i + batch] for i in range(0, len(rows) - batch + 1, batch)]
    ready = [forward(call) for call in calls]  # encoded before any clock starts
    timed: dict[str, Callable[[int], Any]] = {
        "decide": lambda k: controller.decide(calls[k]),
        "forward": lambda k: ready[k](),
        "encode": lambda k: encode(calls[k]),
    }
    for run in timed.values():  # warm-up
        run(0)
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    names = list(timed)
    for k in range(len(calls)):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            started = time.perf_counter()
            timed[name](k)
            seconds[name].append(time.perf_counter() - started)
    out: dict[str, Any] = {"trainer": trainer, "batch": batch, "calls": len(calls),
                           "forward_by": forward_name}  # fmt: skip
    for name, spent in seconds.items():
        per = sorted(s / batch * 1000 for s in spent)
        out[name] = {
            "per_s": round(len(calls) * batch / sum(spent), 1),
            "p50_ms": round(statistics.median(per), 4),
            "p99_ms": round(per[min(len(per) - 1, int(0.99 * len(per)))], 4),
        }
    out["ratio"] = round(out["forward"]["per_s"] / out["decide"]["per_s"], 2)
    return out


def http_bench(
    workdir: Path, trained: dict[str, Path], rows: list[Any], seconds: float, clients: list[int]
) -> list[dict[str, Any]]:
    """Each trained model promoted in a fresh SQLite registry, a `trm decide-server` started on
    it, and one-row requests from `clients` concurrent clients: requests/s, p50/p99 in ms."""
    import asyncio
    import os
    import socket
    import subprocess

    import httpx
    from sqlmodel import Session

    from core.db import make_engine, upgrade
    from core.models import Controller, ControllerVersion

    url = f"sqlite:///{workdir / 'registry.db'}"
    (workdir / "registry.db").unlink(missing_ok=True)
    upgrade(url)
    with Session(make_engine(url)) as session:
        for trainer, folder in trained.items():
            name = f"bench-{trainer}"
            session.add(ControllerVersion(
                name=name, version=1, run_id=name, source_run_id=name, trainer=trainer,
                trainer_dir=str(folder.relative_to(workdir)), promoted_by="bench/decide.py",
            ))  # fmt: skip
            session.add(Controller(name=name, live_version=1))
        session.commit()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "TRM_DATABASE_URL": url, "TRM_RUNS_DIR": str(workdir)}
    env.pop("TRM_API_TOKEN", None)
    log = (workdir / "decide-server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "decide-server", "--port", str(port)],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"decide-server did not start: {workdir / 'decide-server.log'}")
            time.sleep(0.2)
        bodies = [{"state": r.state, "tools": r.tools} for r in rows]
        results = []
        for trainer in trained:
            for count in clients:
                spent = asyncio.run(_load(base, f"bench-{trainer}", bodies, count, seconds))
                per = sorted(spent)
                results.append({
                    "trainer": trainer, "clients": count, "requests": len(per),
                    "per_s": round(len(per) / seconds, 1),
                    "p50_ms": round(statistics.median(per) * 1000, 3),
                    "p99_ms": round(per[min(len(per) - 1, int(0.99 * len(per)))] * 1000, 3),
                })  # fmt: skip
        return results
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


async def _load(
    base: str, name: str, bodies: list[dict[str, Any]], clients: int, seconds: float
) -> list[float]:
    """Each client sends one-row requests back to back on its own connection for `seconds`
    (after one request each to open the connection); each request's round trip in seconds."""
    import asyncio

    import httpx

    spent: list[float] = []

    async def client(k: int) -> None:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
            body = {"controller": name, "rows": [bodies[k % len(bodies)]]}
            (await http.post("/decide", json=body)).raise_for_status()
            await ready.wait()
            i = k
            while time.monotonic() < stop:
                body = {"controller": name, "rows": [bodies[i % len(bodies)]]}
                started = time.perf_counter()
                answer = await http.post("/decide", json=body)
                spent.append(time.perf_counter() - started)
                answer.raise_for_status()
                i += clients

    ready = asyncio.Event()
    stop = float("inf")
    tasks = [asyncio.create_task(client(k)) for k in range(clients)]
    await asyncio.sleep(0.5)
    stop = time.monotonic() + seconds
    ready.set()
    await asyncio.gather(*tasks)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=512, help="rows decided per batch size")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--epochs", type=int, default=3, help="the trm's training epochs")
    parser.add_argument("--keep", type=Path, help="keep the data and models here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--http-seconds",
        type=float,
        default=10.0,
        help="seconds of requests per trainer and client count (0: no HTTP)",
    )
    parser.add_argument("--clients", default="1,50", help="concurrent HTTP clients, each a row")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="trm-decide-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, trained = build(workdir, args.epochs)
    rows = read_rows(corpus, args.rows)
    mean_tools = sum(len(r.tools) for r in rows) / len(rows)
    mean_chars = sum(len(r.state) for r in rows) / len(rows)
    print(f"{len(rows)} routerBench rows, {mean_tools:.1f} candidates and {mean_chars:.0f} "
          f"state characters a row; torch threads {args.threads}")  # fmt: skip
    results = []
    print(
        f"{'trainer':>7} {'batch':>5} | {'decide/s':>9} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'forward/s':>9} {'p50 ms':>7} {'by':>8} | {'encode p50':>10} | {'ratio':>5} | targets"
    )
    for trainer, folder in trained.items():
        for batch in BATCHES:
            r = measure(trainer, folder, rows, batch)
            results.append(r)
            d, f, e = r["decide"], r["forward"], r["encode"]
            met = [
                f"p50 {'met' if d['p50_ms'] <= TARGET_P50_MS else 'NOT met'}" if batch == 1
                else f"rate {'met' if d['per_s'] >= TARGET_RATE else 'NOT met'}",
                f"ratio {'met' if r['ratio'] <= TARGET_RATIO else 'NOT met'}",
            ]  # fmt: skip
            print(f"{trainer:>7} {batch:>5} | {d['per_s']:>9.0f} {d['p50_ms']:>7.3f} "
                  f"{d['p99_ms']:>7.3f} | {f['per_s']:>9.0f} {f['p50_ms']:>7.3f} "
                  f"{r['forward_by']:>8} | "
                  f"{e['p50_ms']:>10.3f} | {r['ratio']:>5.1f} | {', '.join(met)}")  # fmt: skip
    print(f"(ratio: decide time / forward time; targets: p50 <= {TARGET_P50_MS} ms at batch 1, "
          f">= {TARGET_RATE:.0f}/s at batch 64, ratio <= {TARGET_RATIO})")  # fmt: skip
    http: list[dict[str, Any]] = []
    if args.http_seconds > 0:
        clients = [int(c) for c in args.clients.split(",")]
        http = http_bench(workdir, trained, rows, args.http_seconds, clients)
        print(f"\n{'trainer':>7} {'clients':>7} | {'requests/s':>10} {'p50 ms':>7} {'p99 ms':>7} "
              f"| target (p99 <= {TARGET_HTTP_P99_MS:.0f} ms at 50 clients)")  # fmt: skip
        for h in http:
            met = "met" if h["p99_ms"] <= TARGET_HTTP_P99_MS else "NOT met"
            print(
                f"{h['trainer']:>7} {h['clients']:>7} | {h['per_s']:>10.0f} "
                f"{h['p50_ms']:>7.2f} {h['p99_ms']:>7.2f} | {met if h['clients'] >= 50 else ''}"
            )
    if args.json:
        args.json.write_text(json.dumps({"in_process": results, "http": http}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
