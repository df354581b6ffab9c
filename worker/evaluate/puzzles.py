"""The evaluate stage of a `trm_grid` run: the whole-answer model on held-out puzzles.

Scores, each with its n and 95% interval (worker/evaluate/scorecard.py): `anchor_score`, the
share of anchor puzzles answered whole (every cell right), after all N_sup supervision steps
as the paper evaluates; `train_score` the same on a fixed sample of train puzzles;
`generalization_gap` their difference; `cell_accuracy` the cells right among those the puzzle
leaves open. Beside them: the same with halting (and the mean steps it used), exact accuracy
after k = 1..N_sup steps (does more recursion at inference help?), and, where it is cheap, the
**one-step reference**: the same network with n = T = N_sup = 1, trained here on the same train
split for as many optimizer steps as the run took (each costs about 3 network passes against
the recursive model's (n + 1) T + 2 (n + 1)), compared on the same anchors (paired difference,
McNemar). `samples.jsonl` keeps one row per anchor puzzle. `evaluate_stage` is the train
kind's evaluate stage for a trm_grid run (worker/kinds/train.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.card import show_best
from core.rundir import MANIFEST, SAMPLES, SCORECARD, write_json_atomic
from core.schemas.puzzles import GridTrainerConfig
from core.schemas.train import TrainEvaluateConfig
from worker.context import StageContext
from worker.evaluate import scorecard as sc
from worker.evaluate.references import mcnemar
from worker.evaluate.samples import write_samples
from worker.models.trm_grid import GridTRM, load_model
from worker.puzzles import PuzzleSet
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm_grid import exact_by_step, outcomes, train

RECURSION = ("n_recursions", "cycles", "supervision_steps", "gradient")
ONE_STEP = {"n_recursions": 1, "cycles": 1, "supervision_steps": 1, "gradient": "full"}


class _Stop(TrainerCallbacks):
    """The reference's training stops with the stage (cancel, shutdown)."""

    def __init__(self, should_stop: Callable[[], str | None]) -> None:
        super().__init__()
        self.ask = should_stop

    def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
        return None

    def should_stop(self) -> str | None:
        return self.ask()


def _scores(got: dict[str, np.ndarray]) -> dict[str, Any]:
    exact = sc.score([float(v) for v in got["exact"]])
    cells = float(got["right"].sum()) / max(1.0, float(got["open"].sum()))
    return {"exact": exact, "cells": round(cells, 4)}


def evaluate_stage(
    ctx: StageContext, spec: dict[str, Any], resolved: dict[str, Any]
) -> dict[str, Any]:
    """Score the run's model (`evaluate_grid`), write scorecard.json and samples.jsonl, show
    the scores on the card; the stage's result."""
    corpus_dir, out_dir = Path(resolved["corpus_dir"]), Path(resolved["output_dir"])
    launched = json.loads((ctx.run_dir / "launch_trainer" / MANIFEST).read_text(encoding="utf-8"))
    sizes = TrainEvaluateConfig.model_validate(spec.get("evaluate") or {})
    card, samples = evaluate_grid(
        corpus_dir,
        out_dir,
        launched.get("result") or {},
        seed=int(resolved["seed"] or 0),
        train_sample=sizes.train_sample,
        probe=bool(resolved["probe"]),
        should_stop=ctx.should_stop,
        progress=lambda done, total: ctx.progress(done, total, unit="puzzles"),
    )
    card.update(run_id=ctx.run_id, trainer="trm_grid", corpus_hash=resolved["corpus_hash"])
    write_json_atomic(ctx.run_dir / SCORECARD, card)
    write_samples(ctx.run_dir / SAMPLES, samples)
    ctx.inputs.extend(p for p in corpus_dir.glob("*/puzzles.*") if p.is_file())
    ctx.outputs.extend([ctx.run_dir / SCORECARD, ctx.run_dir / SAMPLES])
    ctx.counters["examples_scored"] = card["n"]["train"] + card["n"]["anchor"]
    for note in card["notes"]:
        ctx.note(note)
    show_best(ctx.card, card)
    ctx.progress(
        1,
        1,
        unit="puzzles",
        current_anchor=card["anchor_score"],
        current_train=card["train_score"],
        current_gap=card["generalization_gap"],
    )
    one_step = (card["references"].get("one_step") or {}).get("anchor_score") or {}
    return {
        **sc.headline(card),
        "anchor_split": "anchor",
        "n": card["n"],
        "cell_accuracy": card["cell_accuracy"],
        "one_step_anchor_score": one_step.get("value"),
    }


def evaluate_grid(
    corpus_dir: Path,
    trainer_dir: Path,
    trained: dict[str, Any],
    *,
    seed: int,
    train_sample: int,
    probe: bool,
    should_stop: Callable[[], str | None],
    progress: Callable[[int, int], None],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(scorecard, samples). `trained` is the trainer's result (its steps size the reference)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(trainer_dir, device)
    train_set = PuzzleSet.load(corpus_dir / "train")
    anchors = PuzzleSet.load(corpus_dir / "anchor")
    pick = np.random.default_rng(seed).permutation(len(train_set))[:train_sample]
    sample = PuzzleSet(
        train_set.family,
        train_set.params,
        train_set.inputs[np.sort(pick)],
        train_set.labels[np.sort(pick)],
    )
    if probe:
        sample, anchors = sample.take(slice(0, 1)), anchors.take(slice(0, 1))
    total = len(sample) + len(anchors)
    on_train = outcomes(model, sample)
    progress(len(sample), total)
    on_anchor = outcomes(model, anchors)
    halted = outcomes(model, anchors, halting=True)
    progress(total, total)
    train_scores, anchor_scores = _scores(on_train), _scores(on_anchor)
    gap = sc.difference(train_scores["exact"], anchor_scores["exact"])
    config = model.config
    card: dict[str, Any] = {
        "format": sc.FORMAT,
        "task": "whole_answer",
        "family": train_set.family,
        "params": asdict(train_set.params),
        "model": {"name": "trm_grid", "model_hash": _hash(trainer_dir)},
        "anchor_split": "anchor",
        "scores": {
            "train_score": train_scores["exact"],
            "anchor_score": anchor_scores["exact"],
            "generalization_gap": gap,
        },
        "cell_accuracy": {"train": train_scores["cells"], "anchor": anchor_scores["cells"]},
        "halting": {
            "anchor_score": _scores(halted)["exact"],
            "mean_steps": round(float(halted["steps"].mean()), 3) if len(anchors) else None,
        },
        "exact_by_step": [round(v, 4) for v in exact_by_step(model, anchors)],
        "recursion": {
            k: getattr(config, k)
            for k in ("n_recursions", "cycles", "supervision_steps", "gradient")
        },
        "steps": trained.get("steps"),
        "best_step": trained.get("best_step"),
        "curve": trained.get("curve") or [],
        "notes": [],
    }
    for key, value in card["scores"].items():
        card[key] = value["value"]
    card["failure_rate"] = card["recovery_rate"] = None  # no rollouts: an answer is whole or not
    card["n"] = {"train": len(sample), "anchor": len(anchors)}
    steps = int(trained.get("steps") or 0)
    one_step = config.model_dump() | ONE_STEP
    if probe or steps == 0 or config.model_dump() == one_step:
        card["notes"].append("no one-step reference (a probe, no steps, or the model is one)")
        card["references"] = {}
    else:
        reference = _one_step(one_step, steps, corpus_dir, seed, device, should_stop)
        theirs = outcomes(reference, anchors)
        mine, other = [float(v) for v in on_anchor["exact"]], [float(v) for v in theirs["exact"]]
        card["references"] = {
            "one_step": {
                "model": f"trm_grid one-step (n=T=N_sup=1), {steps} steps",
                "anchor_score": sc.score(other),
                "cell_accuracy": _scores(theirs)["cells"],
                "delta": sc.paired_delta(mine, other),
                "mcnemar": mcnemar(mine, other),
            }
        }
        delta = card["references"]["one_step"]["delta"]
        card["notes"].append(
            f"recursive - one-step {delta['value']:+.3f} exact on {len(anchors)} anchor puzzles"
        )
    samples = [
        {
            "puzzle_hash": hashlib.sha256(anchors.inputs[i].tobytes()).hexdigest()[:16],
            "correct": bool(on_anchor["exact"][i]),
            "cells_right": int(on_anchor["right"][i]),
            "cells_open": int(on_anchor["open"][i]),
            "steps_with_halting": int(halted["steps"][i]),
        }
        for i in range(len(anchors))
    ]
    return card, samples


def _one_step(
    config: dict[str, Any],
    steps: int,
    corpus_dir: Path,
    seed: int,
    device: str,
    should_stop: Callable[[], str | None],
) -> GridTRM:
    cfg = GridTrainerConfig.model_validate(config | {"max_steps": steps})
    val_folder = corpus_dir / "val"
    val = PuzzleSet.load(val_folder) if val_folder.is_dir() else None
    data = PuzzleSet.load(corpus_dir / "train")
    threads = torch.get_num_threads()
    if device == "cpu" and cfg.hidden <= 256:
        torch.set_num_threads(1)
    try:
        model, _ = train(cfg, data, val, _Stop(should_stop), seed=seed, device=device)
    finally:
        torch.set_num_threads(threads)
    return model


def _hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in sorted(p.name for p in folder.iterdir() if p.is_file()):
        digest.update(name.encode() + (folder / name).read_bytes())
    return digest.hexdigest()
