"""Benchmark: candidate scoring against greedy generation, on one trained adapter and one set of
anchors (SPEC §7).

    .venv/bin/python bench/eval_speed.py [--quick] [--adapter DIR] [--rows N] [--keep DIR]

Same process, same 4-bit model with the same `qlora` adapter, same anchor rows, same prompts:
- generate: the reference way to read a controller's answer. `model.generate` greedy, one row at a
  time, then exact match of the text against the candidates (`LmPolicy.generate_pick`; an answer
  that is no candidate counts as wrong);
- generate x8: the same, eight rows per `generate` call (left-padded), so generation gets the
  batching that scoring has;
- scoring: `LmPolicy.scores_batch`, what the evaluate stage runs: the log-likelihood of each
  candidate's answer text; the prompts' shared start computed once, then one forward pass per
  batch of rows, a row's candidates sharing its prompt's keys/values.
- prompts only: not a method but the floor under all of them: scoring's own passes with each
  row's candidates cut to a single token, so only the prompts go through the model.
The table shows examples/s and anchor accuracy for each, how often each agrees with scoring's
pick, and the speed ratio scoring / generate (target >= 5x at equal accuracy). It also shows
generate / prompts only: on a machine where reading the prompt is most of generation's cost (a
CPU), that ratio caps any method that must read each prompt, and scoring / prompts only says
how close scoring comes to the cap.

Without `--adapter`, it first trains a small adapter with `worker.train.qlora.train` on `route`
play logs (worker/envs through the corpus builder; route tags normalized, anchors are an unseen
world), so the comparison runs on a model that answers with candidate ids. `--quick` uses a short
state (the request's fields only: about 115 tokens a prompt instead of about 370) and fewer rows,
to finish in minutes on a laptop CPU. One warm-up row per method is run first; then the methods
take turns on each chunk of 8 rows (the order rotating), so a change in the machine's load hits
them alike, and scoring recomputes its shared prompt start for every chunk (in a real
evaluation it is computed once). Timings on a shared machine are still noisy: compare the
ratios of one run, not absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TARGET_RATIO = 5.0
FLOOR = "prompts only"  # not a method: the cost of reading the prompts, no answer
ANCHOR = "route-s0-w5"
# The request's fields only: short prompts for --quick (the routes table is most of a state).
QUICK_STATE = [
    "observation.request.prompt_text",
    "observation.request.private",
    "observation.request.tools",
    "observation.budget_left",
]


def build_corpus(root: Path, quick: bool) -> Path:
    """`route` play logs, worlds 0-4 trained on, world 5 the anchors."""
    from core.play_files import TRACE_FILE, reasoning_trace_source
    from core.schemas.corpus import CorpusSpec
    from worker.corpus import build_corpus as build
    from worker.envs import generate

    episodes = 8 if quick else 16  # the anchor world's rows: about 20, or about 40
    generate(
        root / "play",
        families=["route"],
        worlds=6,
        episodes=episodes,
        seed=0,
        formats=["trm_play_root", "reasoning_trace"],
    )
    if quick:
        source: dict[str, Any] = reasoning_trace_source(
            "route", str(root / "play" / TRACE_FILE), QUICK_STATE, tags=True
        )
    else:
        source = {"type": "trm_play_root", "name": "route", "path": str(root / "play")}
    knobs = {"namespace_normalization": "auto"}
    spec = {
        "sources": [source],
        "contract": "action_only",
        "knobs": knobs,
        "split": {"by": "env", "anchor": [ANCHOR]},
    }
    build(CorpusSpec.model_validate(spec), root / "corpus")
    return root / "corpus"


def train_adapter(corpus: Path, out: Path, args: argparse.Namespace) -> Path:
    from worker.train import qlora
    from worker.train.callbacks import TrainerCallbacks

    config = {
        "max_steps": args.steps,
        "micro_batch": 4,
        "grad_accum": 1,
        "lr": 2e-3,
        "max_seq_len": 160 if args.quick else 448,
        "eval_every": 10**6,
        "checkpoint_every": 10**6,
    }
    started = time.time()
    result = qlora.train(
        config,
        corpus,
        out,
        TrainerCallbacks(),
        seed=0,
        contract="action_only",
        probe=False,
        model_cache=args.model_cache,
    )
    loss = f"loss {result['first_loss']:.2f} -> {result['final_loss']:.2f}"
    print(
        f"  trained {result['steps']} steps in {time.time() - started:.0f} s ({loss})",
        file=sys.stderr,
    )
    return out / "adapter"


def generate_batched(policy: Any, rows: list[dict[str, Any]], batch: int) -> list[str | None]:
    """Greedy generation, `batch` rows per call (left-padded), then exact match."""
    import torch

    tokenizer, picks = policy.tokenizer, []
    longest = max(len(a) for r in rows for a in policy.encode(r["state"], r["tools"])[1])
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            prompts = [policy.prompt_text(r["state"], r["tools"]) for r in chunk]
            enc = tokenizer(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = policy.model.generate(
                    **enc.to(policy.device),
                    max_new_tokens=longest,
                    do_sample=False,
                    eos_token_id=policy.end_id,
                    pad_token_id=policy.pad_id,
                )
            policy.forward_passes += out.shape[1] - enc["input_ids"].shape[1]
            for row, ids in zip(chunk, out[:, enc["input_ids"].shape[1] :], strict=True):
                text = tokenizer.decode(ids, skip_special_tokens=True).strip()
                picks.append(text if text in row["tools"] else None)
    finally:
        tokenizer.padding_side = side
    return picks


def measure(
    args: argparse.Namespace, adapter: Path, anchors: list[dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], float]:
    """(per method: picks, seconds, model calls, accuracy; mean prompt length in tokens)."""
    from worker.evaluate.lm_scoring import LmPolicy
    from worker.evaluate.policies import load_policy
    from worker.models.policy import argmax

    ref = {
        "type": "qlora",
        "path": str(adapter),
        "contract": "action_only",
        "model_cache": str(args.model_cache),
    }
    policy = load_policy(ref)
    assert isinstance(policy, LmPolicy)
    warm = anchors[:1]
    encoded = [policy.encode(r["state"], r["tools"]) for r in anchors]
    longest = max(len(a) for _, answers in encoded for a in answers)
    prompt_tokens = sum(len(p) for p, _ in encoded) / len(encoded)

    def generate_each(rows: list[dict[str, Any]]) -> list[str | None]:
        return [policy.generate_pick(r["state"], r["tools"], longest) for r in rows]

    def score(rows: list[dict[str, Any]]) -> list[str | None]:
        scores = policy.scores_batch([r["state"] for r in rows], [r["tools"] for r in rows])
        return [r["tools"][argmax(s)] for r, s in zip(rows, scores, strict=True)]

    def prompts_only(rows: list[dict[str, Any]]) -> list[str | None]:
        """The floor: scoring's own passes with every row's candidates cut to one token, so only
        the prompts go through the model (what any method that reads each prompt pays)."""
        rows_encoded = [policy.encode(r["state"], r["tools"])[0] for r in rows]
        prefix = policy._shared_prefix(rows_encoded)
        for start in range(0, len(rows), policy.rows_per_batch):
            batch = rows_encoded[start : start + policy.rows_per_batch]
            policy._score_rows([(p, [[policy.pad_id]]) for p in batch], prefix)
        return [None] * len(rows)

    methods = {
        "generate": generate_each,
        "generate x8": lambda rows: generate_batched(policy, rows, 8),
        "scoring": score,
        FLOOR: prompts_only,
    }
    if args.no_batched_generate:
        methods.pop("generate x8")
    for method in methods.values():
        method(warm)
    # The machine's load changes under a shared CPU: the methods take turns on each chunk of rows
    # (the order rotating), so each sees the same conditions; the times are summed per method.
    results = {name: {"picks": [], "seconds": 0.0, "forward_calls": 0} for name in methods}
    chunk = 8
    for c, start in enumerate(range(0, len(anchors), chunk)):
        rows = anchors[start : start + chunk]
        names = list(methods)
        for name in names[c % len(names) :] + names[: c % len(names)]:
            policy._prefix = None  # scoring pays for its shared prefix in every chunk
            calls = policy.forward_passes
            started = time.perf_counter()
            picks = methods[name](rows)
            results[name]["seconds"] += time.perf_counter() - started
            results[name]["forward_calls"] += policy.forward_passes - calls
            results[name]["picks"].extend(picks)
        print(
            f"  rows {start + len(rows)}/{len(anchors)}: "
            + ", ".join(f"{n} {r['seconds']:.0f} s" for n, r in results.items()),
            file=sys.stderr,
        )
    for r in results.values():
        right = [p == row["action"] for p, row in zip(r["picks"], anchors, strict=True)]
        r["accuracy"] = sum(right) / len(anchors)
        r["no_candidate"] = sum(p is None for p in r["picks"])
    return results, prompt_tokens


def table(results: dict[str, dict[str, Any]], anchors: list[dict], prompt_tokens: float) -> str:
    scoring, n = results["scoring"], len(anchors)
    worlds = sorted({str((r.get("meta") or {}).get("world_id")) for r in anchors})
    lines = [
        f"{n} anchor rows (unseen world {', '.join(worlds)}), prompts {prompt_tokens:.0f} tokens "
        "on average",
        "",
        f"{'method':<13} {'seconds':>8} {'examples/s':>11} {'accuracy':>9} "
        f"{'agrees':>7} {'no cand.':>9} {'model calls':>12}",
    ]
    for name, r in results.items():
        if name == FLOOR:  # it picks nothing
            picks = f"{'-':>9} {'-':>7} {'-':>9}"
        else:
            agree = sum(a == b for a, b in zip(r["picks"], scoring["picks"], strict=True)) / n
            picks = f"{r['accuracy']:>9.3f} {agree:>7.3f} {r['no_candidate']:>9d}"
        lines.append(
            f"{name:<13} {r['seconds']:>8.1f} {n / r['seconds']:>11.3f} {picks} "
            f"{r['forward_calls']:>12d}"
        )
    lines.append("")
    floor = results[FLOOR]["seconds"]
    for name in (k for k in results if k not in ("scoring", FLOOR)):
        ratio = results[name]["seconds"] / scoring["seconds"]
        same = abs(results[name]["accuracy"] - scoring["accuracy"]) < 1e-9
        verdict = "met" if ratio >= TARGET_RATIO and same else "NOT met"
        lines.append(
            f"scoring / {name}: {ratio:.1f}x examples/s, accuracy {scoring['accuracy']:.3f} vs "
            f"{results[name]['accuracy']:.3f} (target >= {TARGET_RATIO:.0f}x at equal accuracy:"
            f" {verdict})"
        )
        lines.append(
            f"  ceiling for any method that reads each prompt once: {name} / prompts only = "
            f"{results[name]['seconds'] / floor:.1f}x"
        )
    lines.append(
        f"scoring takes {scoring['seconds'] / floor:.2f}x the time of reading the prompts alone"
    )
    lines.append("(model calls: forward passes; a generated token is one)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short prompts, 16 rows, 12 steps")
    parser.add_argument("--adapter", type=Path, help="a trained qlora adapter dir (skip training)")
    parser.add_argument(
        "--corpus", type=Path, help="a corpus dir with anchor.jsonl (with --adapter)"
    )
    parser.add_argument("--rows", type=int, help="anchor rows to time (default 16 quick, 40)")
    parser.add_argument("--steps", type=int, help="training steps (default 12 quick, 16)")
    parser.add_argument("--no-batched-generate", action="store_true")
    parser.add_argument(
        "--model-cache", type=Path, default=Path(os.environ.get("TRM_MODEL_CACHE", "models"))
    )
    parser.add_argument("--keep", type=Path, help="work folder to keep (corpus, adapter)")
    args = parser.parse_args()
    args.rows = args.rows or (16 if args.quick else 40)
    args.steps = args.steps or (12 if args.quick else 16)

    from worker.evaluate.samples import read_jsonl
    from worker.models.base_model import BUILTIN, resolve_base_model

    resolve_base_model(BUILTIN, args.model_cache)
    work = args.keep
    if not (args.adapter and args.corpus):
        work = work or Path(tempfile.mkdtemp(prefix="eval-speed-"))
        work.mkdir(parents=True, exist_ok=True)
        print(f"  work folder {work}", file=sys.stderr)
    corpus = args.corpus or work / "corpus"
    if not (corpus / "anchor.jsonl").exists():
        corpus = build_corpus(work, args.quick)
    adapter = args.adapter or train_adapter(corpus, work / "trainer", args)
    anchors = read_jsonl(corpus / "anchor.jsonl")[: args.rows]
    results, prompt_tokens = measure(args, adapter, anchors)
    print(table(results, anchors, prompt_tokens))


if __name__ == "__main__":
    main()
