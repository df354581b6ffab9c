"""The `gbdt` trainer (SPEC §6): a LightGBM lambdarank candidate ranker on the generic features,
what a user would write instead of a neural controller, so every scorecard can stand the router
next to it. Deterministic in the run's seed (one thread, LightGBM's deterministic mode).

Boosting stops early when the val split's top-1 accuracy (`ndcg@1` with one right candidate per
row) has not improved for `early_stopping_rounds`; the best round is kept. A cancel or budget stop
ends boosting at the next round and keeps what was built.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from core.rundir import TRAIN_ROWS, VAL_ROWS
from core.schemas.train import GbdtTrainerConfig
from worker.context import StageFailure
from worker.features import explain
from worker.models import gbdt
from worker.models.feature_space import FeatureSpace
from worker.models.rows import read_rows
from worker.train.callbacks import TrainerCallbacks

REPORT_EVERY = 10  # rounds between progress reports
TOP_FEATURES = 20  # features listed in the trainer's result, by gain


def labels(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.array([int(t == r["action"]) for r in rows for t in r["tools"]], dtype=np.int32)


def ranker_params(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    """LightGBM's parameters for a candidate ranker of this config (a validated
    GbdtTrainerConfig's dump): lambdarank, judged by ndcg@1, deterministic on one thread."""
    return {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [1],
        "learning_rate": cfg["learning_rate"],
        "num_leaves": cfg["num_leaves"],
        "min_child_samples": cfg["min_child_samples"],
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": 1,
        "verbosity": -1,
    }


def fit(
    rows: list[dict[str, Any]],
    val: list[dict[str, Any]],
    config: dict[str, Any],
    seed: int,
    callbacks: TrainerCallbacks | None = None,
) -> tuple[Any, FeatureSpace, dict[str, Any]]:
    """(the booster, its feature space, what happened): also used in-process by the scorecard's
    reference learner."""
    from worker.models.lgbm import lightgbm

    try:
        cfg = GbdtTrainerConfig.model_validate(config).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StageFailure("bad_input", f"gbdt.{where}: {first['msg']}") from None
    space = FeatureSpace.fit(rows, text_encoder=cfg["text_encoder"])
    x, groups = gbdt.matrix(space, rows)
    params = ranker_params(cfg, seed)
    train_set = lightgbm.Dataset(
        x, labels(rows), group=groups, feature_name=space.columns, free_raw_data=True
    )
    hooks: list[Any] = []
    valid: list[Any] = []
    if val:
        xv, gv = gbdt.matrix(space, val)
        valid = [lightgbm.Dataset(xv, labels(val), group=gv, reference=train_set)]
        hooks.append(lightgbm.early_stopping(cfg["early_stopping_rounds"], verbose=False))
    stopped: dict[str, Any] = {"by": None}
    if callbacks is not None:
        hooks.append(_reporter(callbacks, cfg["n_estimators"], stopped))
    booster = lightgbm.train(
        params, train_set, num_boost_round=cfg["n_estimators"], valid_sets=valid, callbacks=hooks
    )
    best = booster.best_iteration or booster.current_iteration()
    if best and best < booster.current_iteration():
        booster = lightgbm.Booster(model_str=booster.model_to_string(num_iteration=best))
    return (
        booster,
        space,
        {
            "rounds": best,
            "stopped_by": stopped["by"],
            "features": len(space.names),
            "top_features": top_features(booster, space),
        },
    )


def top_features(booster: Any, space: FeatureSpace, k: int = TOP_FEATURES) -> list[dict[str, Any]]:
    """The model's `k` features of most gain, each by its name and in words (`explain`)."""
    return features_by_gain(booster.feature_importance(importance_type="gain"), space.names, k)


def features_by_gain(gains: Any, names: list[str], k: int) -> list[dict[str, Any]]:
    """The `k` names of most gain (ties: the earlier), each with its gain and in words; none of
    no gain."""
    order = sorted(range(len(gains)), key=lambda i: (-gains[i], i))
    return [
        {"feature": names[i], "gain": round(float(gains[i]), 3), "meaning": explain(names[i])}
        for i in order[:k]
        if gains[i] > 0
    ]


def _reporter(callbacks: TrainerCallbacks, total: int, stopped: dict[str, Any]) -> Any:
    from worker.models.lgbm import lightgbm

    def report(env: Any) -> None:
        step = env.iteration + 1
        if step % REPORT_EVERY == 0 or step == total:
            evals = {
                f"val_{name}": round(value, 4) for _, name, value, _ in env.evaluation_result_list
            }
            callbacks.on_step(step, total, **evals)
        reason = callbacks.should_stop()
        if reason is not None:
            stopped["by"] = reason
            raise lightgbm.callback.EarlyStopException(env.iteration, env.evaluation_result_list)

    return report


def train(
    config: dict[str, Any],
    corpus_dir: Path,
    out_dir: Path,
    callbacks: TrainerCallbacks,
    *,
    seed: int,
    contract: str = "action_only",
    probe: bool = False,
    model_cache: Path | None = None,
) -> dict[str, Any]:
    """Train on `corpus_dir/train.jsonl` (early stopping on val.jsonl); write model.txt and
    features.json. `contract` and `model_cache` are unused (the trainers share one signature)."""
    started = time.perf_counter()
    rows = read_rows(Path(corpus_dir) / TRAIN_ROWS)
    if not rows:
        raise StageFailure("bad_input", f"{Path(corpus_dir) / TRAIN_ROWS} has no rows")
    val = read_rows(Path(corpus_dir) / VAL_ROWS)
    if probe:
        rows, val, config = rows[:8], val[:8], {**config, "n_estimators": 2}
    booster, space, info = fit(rows, val, config, seed, callbacks)
    artifacts = gbdt.save(Path(out_dir), booster, space)
    return {
        "trainer": "gbdt",
        "steps": info["rounds"],
        "rows_trained": len(rows),
        "tokens_trained": 0,
        "stopped_by": info["stopped_by"],
        "features": info["features"],
        "top_features": info["top_features"],
        "artifacts": [str(p) for p in artifacts],
        "device": "cpu",
        "train_seconds": round(time.perf_counter() - started, 3),
    }
