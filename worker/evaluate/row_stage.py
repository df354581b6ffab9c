"""The train kind's evaluate stage for a model trained on rows (trm, gbdt, qlora;
worker/kinds/train.py): the model on the corpus's train sample and anchors
(worker/evaluate/anchors.py), beside the references a user would pick instead and, for trm, the
same model untrained; writes scorecard.json and samples.jsonl. worker/evaluate/puzzles.py is the
same stage for a trm_grid run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.card import show_best
from core.rundir import SAMPLES, SCORECARD, TRAIN_ROWS, VAL_ROWS, write_json_atomic
from core.schemas.train import TrainEvaluateConfig
from worker.context import StageContext, StageFailure
from worker.evaluate import scorecard as sc
from worker.evaluate.anchors import (
    anchor_rows,
    critic_rows,
    evaluate_policy,
    policy_ref,
    train_sample,
)
from worker.evaluate.policies import load_policy
from worker.evaluate.references import correct, references
from worker.evaluate.references import summary as references_summary
from worker.evaluate.samples import read_jsonl, run_sample_cache, write_samples
from worker.models.rows import read_rows


def evaluate_stage(
    ctx: StageContext, spec: dict[str, Any], resolved: dict[str, Any]
) -> dict[str, Any]:
    """Score the run's model (`resolved`: the train kind's resolved config), write
    scorecard.json and samples.jsonl (one row per anchor example), show the scores on the card;
    the stage's result."""
    corpus_dir = Path(resolved["corpus_dir"])
    train_path = corpus_dir / TRAIN_ROWS
    if not train_path.exists():
        raise StageFailure("dependency", f"{train_path} is missing: prepare_corpus writes it")
    policy = load_policy(policy_ref(resolved))
    seed = int(resolved["seed"] or 0)
    sizes = TrainEvaluateConfig.model_validate(spec.get("evaluate") or {})
    train = train_sample(read_jsonl(train_path), seed, sizes.train_sample)
    anchors, split = anchor_rows(corpus_dir)
    if resolved["probe"]:
        train, anchors = train[:1], anchors[:1]
    critic = critic_rows(corpus_dir)
    cache = run_sample_cache(ctx.settings.runs_dir, ctx.run_dir, policy.model_hash)
    card, samples, counters = evaluate_policy(
        policy,
        train,
        anchors,
        split,
        spec.get("corpus") or {},
        cache,
        critic=critic,
        seed=seed,
        episodes=2 if resolved["probe"] else sizes.episodes,
        progress=lambda done, total: ctx.progress(done, total, unit="rows"),
        should_stop=ctx.should_stop,
        on_pass=ctx.pass_progress,
    )
    card.update(run_id=ctx.run_id, trainer=resolved["trainer"], corpus_hash=resolved["corpus_hash"])
    # What a user would pick instead, trained on the same train split, on the same anchors.
    fit_rows = read_rows(train_path)[: 50 if resolved["probe"] else None]
    card["references"] = references(
        [float(s["correct"]) for s in samples],
        anchors,
        fit_rows,
        read_rows(corpus_dir / VAL_ROWS),
        seed,
    )
    ctx.note(references_summary(card["references"]))
    untrained = untrained_score(resolved, train_path, anchors)
    if untrained is not None:
        card["untrained_anchor_score"] = untrained
    rows = len(train) + len(anchors)
    _record(ctx, card, samples, counters, [train_path, corpus_dir / f"{split}.jsonl"], rows)
    return {
        **sc.headline(card),
        "anchor_split": split,
        "n": card["n"],
        "untrained_score": untrained["value"] if untrained else None,
    }


def _record(
    ctx: StageContext,
    card: dict[str, Any],
    samples: list[dict[str, Any]],
    counters: dict[str, int],
    inputs: list[Path],
    rows: int,
) -> None:
    """scorecard.json and samples.jsonl written; the stage's inputs (those of `inputs` there),
    outputs and counters; the card's notes and best; the progress at its end, `rows` scored."""
    write_json_atomic(ctx.run_dir / SCORECARD, card)
    write_samples(ctx.run_dir / SAMPLES, samples)
    ctx.inputs.extend(p for p in inputs if p.exists())
    ctx.outputs.extend([ctx.run_dir / SCORECARD, ctx.run_dir / SAMPLES])
    ctx.counters["examples_scored"] = counters["scored"] + counters["cached"]
    ctx.counters["examples_cached"] = counters["cached"]
    ctx.counters["tokens_scored"] = counters["tokens_scored"]
    for note in card["notes"]:
        ctx.note(note)
    # A train run's best is what it trained, as measured here (the runs list's best_anchor).
    show_best(ctx.card, card)
    ctx.progress(
        rows,
        rows,
        unit="rows",
        current_anchor=card["anchor_score"],
        current_train=card["train_score"],
        current_gap=card["generalization_gap"],
    )


def untrained_score(
    resolved: dict[str, Any], train_path: Path, anchors: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The same trm, untrained (same config, seed and features), on the same anchors: the floor a
    trained model must clear; a tie means it learned nothing the anchors can see. None for qlora
    (its untrained model is the base LM: a second full scoring pass) and gbdt."""
    if resolved["trainer"] != "trm" or not anchors:
        return None
    ref = {
        "type": "untrained_trm",
        "vocab_rows": str(train_path),
        "seed": int(resolved["seed"] or 0),
        "config": resolved["config"] or {},
    }
    return sc.score(correct(load_policy(ref), anchors))
