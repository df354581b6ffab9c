"""Benchmark: our `qlora` trainer against the skill's original recipe (TRL SFTTrainer).

    .venv/bin/python bench/train_throughput.py [--steps 3] [--shape qwen2.5-0.5b] [--keep DIR]
        [--no-rss] [--no-service] [--pairs 2] [--model-cache DIR]
        [--dtype auto|float32|bfloat16] [--threads N] [--micro-batch 1] [--profile]
        [--activation-budget-mb auto] [--dequant-cache auto|on|off]

Same machine, same base model (4-bit NF4, double quant, same LoRA), same corpus (`route` play logs
through the corpus builder, `action_only`), same effective batch (16 rows per optimizer step):
- baseline: TRL `SFTTrainer`, batch 1 x accumulation 16, sequences up to 512 tokens, loss on the
  whole conversation, no packing (TRL's defaults otherwise: gradient checkpointing on, bf16
  mixed precision where the device has bf16);
- ours: `worker.train.qlora.train`, micro-batch `--micro-batch` (default 1, TRL's shape) x
  accumulation 16 / micro-batch, sequences up to 512, packing, loss on the assistant tokens, its
  speed knobs `--activation-budget-mb` (default: the trainer's `auto`: the layers whose
  activations fit are not recomputed) and `--dequant-cache` (default auto: the frozen weights
  dequantized once on a CPU computing in bf16); at the defaults ours is the trainer as it runs
  with its own defaults on a CPU (micro_batch and grad_accum `auto` too), and its peak RSS is at
  most TRL's.
Both sides compute in the dtype `--dtype` names, "auto" being what `worker.models.lm.
device_and_dtype()` picks for this machine (bf16 on CUDA and on CPUs with AVX512-BF16, else
float32; float32 on a bf16 CPU measures the other CPU kind's path), run `--threads` torch threads
(default: torch's, one per core; on a machine shared with other work, 1 keeps a descheduled
thread from stalling every op), and start with the environment the service starts its trainers
with (`memory.CHILD_ENV`). The table's head names the CPU (model, AVX512-F/VNNI/BF16, AMX) and
each side's dtype and kernels (attention, gradient checkpointing, dequantized copy, 4-bit matmul,
threads). Ours runs one more step after the timed ones, untimed, under torch.profiler; `--profile`
prints where that step's time went (the top ops), and so does a ratio below the target.
Each side runs in its own process for `--steps` timed optimizer steps after one warm-up step;
the table shows real (non-padding) training tokens per second, and the ratio (target >= 1.5x).
A third process runs ours at micro-batch 8 x 256 tokens and reports its peak RSS (target < 3 GB
for SmolLM2-135M). `--shape` trains a randomly initialised model of a real architecture's size
instead (throughput needs no pretrained weights); on CUDA (bf16 compute, paged 8-bit AdamW) the
table adds peak VRAM and MFU against a measured bf16 matmul rate.

Service overhead (target <= 5%): the same training as "ours" (same config, corpus, seed, steps)
submitted as a `train` run to a real `trm serve` + `trm worker` (SQLite, the local Redis), timed
from `POST /runs` to the `launch_trainer` stage's end, against "ours" timed from its process's
start to its return. The service side also builds the corpus from the play logs, queues the run,
starts the stage's child process and publishes every step to the database, Redis and the card;
the run is cancelled once its trainer is done (its `evaluate` stage is not training). The table
shows both walls, the difference, and each side's in-loop rate (tokens/s over all its steps), which
separates what the service adds per step from what it adds once. Direct and service runs come in
`--pairs` pairs (default 2) in alternating order, and the walls compared are the means: on a
shared machine one pair alone can differ by more than the 5% being measured.

The sides themselves (ours, TRL's, one process each) are bench/train_sides.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.machine import cpu_kind  # noqa: E402
from bench.train_sides import ours_config, side  # noqa: E402
from core.schemas.train import EFFECTIVE_BATCH, QloraTrainerConfig  # noqa: E402
from worker.train.memory import CHILD_ENV  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TARGET_RATIO = 1.5
TARGET_RSS_GB = 3.0
TARGET_OVERHEAD = 0.05
BUDGET_MB = QloraTrainerConfig().activation_budget_mb  # the trainer's default
SHAPES: dict[str, dict[str, Any]] = {  # Qwen2.5 sizes from their published configs
    "qwen2.5-0.5b": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "qwen2.5-1.5b": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
}


def build_corpus(root: Path) -> Path:
    from core.schemas.corpus import CorpusSpec
    from worker.corpus import build_corpus as build
    from worker.envs import generate

    generate(root / "play", families=["route"], worlds=6, episodes=8, seed=0)
    source = {"type": "trm_play_root", "name": "route", "path": str(root / "play")}
    build(CorpusSpec.model_validate({"sources": [source]}), root / "corpus")
    return root / "corpus"


def build_shape(name: str, cache: Path) -> str:
    """A random model with `name`'s shape and SmolLM2's tokenizer, saved once into the cache."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from worker.models.base_model import BUILTIN, resolve_base_model

    folder = cache / f"shape-{name}"
    if not (folder / "config.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(resolve_base_model(BUILTIN, cache))
        shape = dict(SHAPES[name])
        config = AutoConfig.for_model(shape.pop("model_type"), **shape)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)


def budget_mb(text: str) -> int | str:
    return text if text == "auto" else int(text)


def spawn(args: argparse.Namespace, name: str, **overrides: Any) -> dict[str, Any]:
    command = [sys.executable, __file__, "--side", name, "--corpus", str(args.corpus)]
    options = {
        "steps": args.steps,
        "model-cache": args.model_cache,
        "work": args.work,
        "base-model": args.base_model,
        "micro-batch": args.micro_batch,
        "seq": 512,
        "dtype": args.dtype,
        "threads": args.threads,
        "profile-step": 0,
        "activation-budget-mb": args.activation_budget_mb,
        "dequant-cache": args.dequant_cache,
        **overrides,
    }
    for key, value in options.items():
        command += [f"--{key}", str(value)]
    started = time.time()
    env = {**CHILD_ENV, **os.environ}  # both sides allocate as the service's trainer does
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.time() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"{name} failed:\n{done.stderr[-4000:]}")
    print(f"  {name}: {wall:.0f} s", file=sys.stderr)
    return {**json.loads(lines[-1][len("RESULT ") :]), "wall": wall}


def run_service(args: argparse.Namespace) -> dict[str, Any]:
    """Our side's training as a `train` run through a real API and worker: seconds from the POST
    to the end of its `launch_trainer` stage."""
    import httpx

    from core.rundir import sha256_file
    from tests.stack import Scratch, Stack, create_database

    folder = args.work / "service"  # its database, runs and logs; the play logs "ours" trained on
    scratch = Scratch(
        folder,
        create_database("sqlite", folder),
        prefix="tt",
        data_dir=args.work / "data",
        model_cache=args.model_cache,
    )
    scratch.migrate()
    threads = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
    stack = Stack({**scratch.env, **threads, "TRM_LOG_LEVEL": "WARNING"}, folder / "logs")
    spec = {
        "kind": "train",
        "trainer": "qlora",
        "seed": 0,
        "corpus": {"sources": [{"type": "trm_play_root", "name": "route", "path": "play"}]},
        "qlora": ours_config(args),
    }
    try:
        stack.start_api()
        stack.start_worker()
        client = httpx.Client(base_url=stack.url, timeout=30)
        time.sleep(3.0)  # the worker polling, as a running service's would be
        started = time.time()
        run = client.post("/runs", json=spec).json()
        trainer: dict[str, Any] = {}
        while trainer.get("status") not in ("completed", "failed"):
            time.sleep(0.2)
            shown = client.get(f"/runs/{run['id']}").json()
            if shown["status"] in ("failed", "cancelled"):
                sys.exit(f"service run {shown['status']}: {shown.get('failure_reason')}")
            stage = [s for s in shown["stages"] if s["name"] == "launch_trainer"]
            trainer = (stage[0].get("manifest") or {}) if stage else {}
        wall = time.time() - started
        client.post(f"/runs/{run['id']}/cancel")
        if trainer["status"] != "completed":
            sys.exit(f"service run's trainer failed: {trainer.get('error')}")
        began = datetime.fromisoformat(trainer["started_at"]).timestamp()
        ended = datetime.fromisoformat(trainer["completed_at"]).timestamp()
        result = trainer["result"]
        meta = args.work / "service" / "runs" / run["id"] / "trainer" / "run_meta.json"
        same_rows = json.loads(meta.read_text())["messages_sha256"]["train"] == sha256_file(
            args.corpus / "messages.jsonl"
        )
        print(f"  service: {wall:.0f} s", file=sys.stderr)
        return {
            "wall": wall,
            "stage_seconds": ended - began,
            "same_rows": same_rows,
            "loop_tokens_per_s": result["tokens_per_s"],
            "trainer_seconds": result["seconds"],
        }
    finally:
        stack.stop()
        scratch.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps per side")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="random model of this size")
    parser.add_argument("--model-cache", type=Path, help="MODEL_CACHE (default: a temp folder)")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: temporary)")
    parser.add_argument("--no-rss", action="store_true", help="skip the 8 x 256 RSS run")
    parser.add_argument("--no-service", action="store_true", help="skip the service overhead")
    parser.add_argument(
        "--pairs", type=int, default=2, help="direct / service pairs for the overhead (mean)"
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="compute dtype of both sides (default: auto, what this machine's trainer picks)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=1,
        choices=[1, 2, 4, 8, 16],
        help="ours: micro-batch (x 16 / it accumulation; default 1: TRL's shape, and the "
        "trainer's `auto` on a CPU)",
    )
    parser.add_argument("--profile", action="store_true", help="print where ours' step time went")
    parser.add_argument(
        "--activation-budget-mb",
        type=budget_mb,
        default=BUDGET_MB,
        help=f"ours: qlora.activation_budget_mb, MiB or auto (default {BUDGET_MB}, the trainer's)",
    )
    parser.add_argument(
        "--dequant-cache",
        default="auto",
        choices=["auto", "on", "off"],
        help="ours: qlora.dequant_cache (default auto, the trainer's default)",
    )
    # for the child processes
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--base-model", default="smollm2-135m-instruct", help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=512, help=argparse.SUPPRESS)
    parser.add_argument("--profile-step", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return side(args)

    work = args.keep or Path(tempfile.mkdtemp(prefix="train-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    args.work = work
    args.model_cache = args.model_cache or work / "models"
    from worker.models.base_model import resolve_base_model

    resolve_base_model("smollm2-135m-instruct", args.model_cache)  # convert once, before timing
    if args.shape:
        args.base_model = build_shape(args.shape, args.model_cache)
    args.corpus = build_corpus(work / "data")
    rows = sum(1 for _ in (args.corpus / "messages.jsonl").open())
    print(f"model {args.base_model}, {rows} train rows, {args.steps} timed steps", file=sys.stderr)

    trl = spawn(args, "trl")
    rss = None if args.no_rss else spawn(args, "ours", **{"seq": 256, "steps": 1, "micro-batch": 8})
    if args.no_service:
        ours, service = spawn(args, "ours", **{"profile-step": 1}), None
    else:  # pairs in alternating order, so a drift in the machine's speed hits both sides alike
        directs, services = [], []
        for pair in range(args.pairs):
            first_direct = pair % 2 == 0
            if first_direct:
                directs.append(spawn(args, "ours", **{"profile-step": int(pair == 0)}))
            services.append(run_service(args))
            if not first_direct:
                directs.append(spawn(args, "ours"))

        def mean(runs: list[dict[str, Any]], key: str) -> float:
            return sum(r[key] for r in runs) / len(runs)

        ours = {
            **directs[0],  # rss, vram, params, loss: alike in every direct run
            "tokens": sum(d["tokens"] for d in directs),
            "seconds": sum(d["seconds"] for d in directs),
            "direct_wall": mean(directs, "direct_wall"),
            "loop_tokens_per_s": mean(directs, "loop_tokens_per_s"),
        }
        service = {
            "wall": mean(services, "wall"),
            "loop_tokens_per_s": mean(services, "loop_tokens_per_s"),
            "same_rows": all(s["same_rows"] for s in services),
            "pairs": [
                (d["direct_wall"], s["wall"]) for d, s in zip(directs, services, strict=True)
            ],
        }
    print_table(args, trl, ours, rss, service)


def print_table(args, trl, ours, rss, service) -> None:
    def rate(side: dict[str, Any]) -> float:
        return side["tokens"] / side["seconds"]

    gb = 1024**3
    tflops = ours.get("tflops")
    micro = args.micro_batch
    rows = [("", "TRL SFTTrainer (1 x 16, 512)", f"qlora ({micro} x {16 // micro}, 512, packed)")]
    for key in (
        "compute_dtype",
        "attention",
        "gradient_checkpointing",
        "dequant_cache",
        "matmul_4bit",
        "threads",
    ):
        rows.append((key.replace("_", " "), str(trl["kernels"][key]), str(ours["kernels"][key])))
    rows.append(("real tokens / s", f"{rate(trl):.1f}", f"{rate(ours):.1f}"))
    rows.append(("timed tokens", str(trl["tokens"]), str(ours["tokens"])))  # ours: every direct run
    rows.append(("timed seconds", f"{trl['seconds']:.1f}", f"{ours['seconds']:.1f}"))
    rows.append(("peak RSS (GB)", f"{trl['rss'] / gb:.2f}", f"{ours['rss'] / gb:.2f}"))
    if ours["vram"] is not None:
        rows.append(("peak VRAM (GB)", f"{trl['vram'] / gb:.2f}", f"{ours['vram'] / gb:.2f}"))
    if tflops:  # a frozen base costs 4N flops per token (forward, backward to activations)
        mfu = [4 * s["params"] * rate(s) / (tflops * 1e12) for s in (trl, ours)]
        rows.append((f"MFU (4N/token, {tflops:.0f} TF/s)", f"{mfu[0]:.1%}", f"{mfu[1]:.1%}"))
    rows.append(("wall, process start -> trained (s)", f"{trl['wall']:.1f}", f"{ours['wall']:.1f}"))
    if service:
        overhead = service["wall"] / ours["direct_wall"] - 1
        n = len(service["pairs"])
        rows.append((f"  ours called directly (s, mean of {n})", "-", f"{ours['direct_wall']:.1f}"))
        rows.append(
            (f"  same run via API + worker (s, mean of {n})", "-", f"{service['wall']:.1f}")
        )
        each = ", ".join(f"{d:.0f}/{s:.0f}" for d, s in service["pairs"])
        rows.append(("  each pair, direct/service (s)", "-", each))
        rows.append(("  service overhead", "-", f"{overhead:+.1%}"))
        loop = f"{ours['loop_tokens_per_s']:.1f} / {service['loop_tokens_per_s']:.1f}"
        rows.append(("  in-loop tokens/s, direct / service", "-", loop))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"\nCPU: {cpu_kind()}")
    print(f"base model: {args.shape or args.base_model}; effective batch {EFFECTIVE_BATCH} rows")
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, width, strict=True)))
    ratio = rate(ours) / rate(trl)
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"\nspeed-up: {ratio:.2f}x real tokens/s (target >= {TARGET_RATIO}x): {verdict}")
    if (args.profile or ratio < TARGET_RATIO) and ours.get("profile"):
        print("where ours' step time went (one untimed step, torch.profiler, self CPU time):")
        for op, share in ours["profile"]:
            print(f"  {share:6.1%}  {op}")
    if rss:
        peak = rss["rss"] / gb
        verdict = "ok" if peak < TARGET_RSS_GB else "ABOVE TARGET"
        target = f"target < {TARGET_RSS_GB}"
        print(f"peak RSS at micro-batch 8 x 256: {peak:.2f} GB ({target}): {verdict}")
    if service:
        overhead = service["wall"] / ours["direct_wall"] - 1
        verdict = "ok" if overhead <= TARGET_OVERHEAD else "ABOVE TARGET"
        same = "" if service["same_rows"] else " (WARNING: the service run trained other rows)"
        print(
            f"service overhead: {overhead:+.1%} wall, POST -> trainer done vs a direct call "
            f"(target <= {TARGET_OVERHEAD:.0%}): {verdict}{same}"
        )


if __name__ == "__main__":
    main()
