"""How the trm picks the epoch it keeps: by ranking AUC, for a router swept by threshold, the
epoch whose scores rank the val rows best is kept even where another picks more rows right; by
`accuracy_1se`, the latest epoch within a standard error of the best val accuracy."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sklearn.metrics import roc_auc_score

from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import ranking_auc, train


def write_router_corpus(root: Path, rows: int = 400, seed: int = 0) -> Path:
    """Two candidates, `weak` and `strong`; `strong` is the answer more often the harder the
    prompt, but for under half of them even at the hardest: the best pick is nearly always
    `weak`, and only the ranking of prompts by hardness shows what was learned."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", rows), ("val", rows // 2)):
        out = []
        for _ in range(n):
            hard = rng.random()
            strong = rng.random() < 0.1 + 0.5 * hard
            state = json.dumps({"hard": round(hard, 3), "turn": rng.randint(0, 9)})
            action = "strong" if strong else "weak"
            out.append({"state": state, "tools": ["weak", "strong"], "action": action, "meta": {}})
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return root


def test_ranking_auc_of_two_candidates_is_the_roc_auc_of_the_strong_score() -> None:
    rng = random.Random(3)
    strong = [rng.random() < 0.3 for _ in range(200)]
    margin = [rng.gauss(1.0 if s else 0.0, 1.0) for s in strong]
    # Log-probabilities of (weak, strong) from the margin strong - weak.
    rows = [[-m / 2, m / 2] for m in margin]
    auc = ranking_auc([["weak", "strong"]] * 200, [int(s) for s in strong], rows)
    assert auc == pytest.approx(roc_auc_score(strong, margin))


def test_ranking_auc_compares_a_candidate_with_itself_where_it_is_wrong() -> None:
    tools = [["a", "b", "c"], ["a", "b"], ["c", "a"]]
    scores = [[-0.1, -2.0, -3.0], [-0.5, -1.0], [-0.2, -2.0]]
    # Row 1: `a` at -0.1 outscores its wrong instance (row 3, -2.0); row 2: `b` at -1.0
    # outscores its own (row 1, -2.0); row 3: `c` at -0.2 outscores -3.0 (row 1).
    assert ranking_auc(tools, [0, 1, 0], scores) == pytest.approx(1.0)
    assert ranking_auc(tools, [1, 0, 1], scores) == pytest.approx(0.0)
    assert ranking_auc([["a"], ["b"]], [0, 0], [[0.0], [0.0]]) is None  # never wrong


def test_select_by_auc_keeps_the_best_ranking_epoch_over_the_most_accurate(tmp_path) -> None:
    corpus = write_router_corpus(tmp_path / "corpus")
    callbacks = TrainerCallbacks()
    config = {"select_by": "auc", "epochs": 8, "patience": 8, "hidden": 16}
    result = train(config, corpus, tmp_path / "trm", callbacks, seed=0)
    aucs = [e["val_auc"] for e in callbacks.evals]
    accuracies = [e["val_accuracy"] for e in callbacks.evals]
    kept = max(range(len(aucs)), key=lambda i: (aucs[i], -callbacks.evals[i]["val_loss"], -i))
    assert result["best_epoch"] == callbacks.evals[kept]["epoch"]
    # Selecting by accuracy would have kept another epoch: this one ranks better, picks worse.
    assert accuracies[kept] < max(accuracies)
    assert result["eval"]["val_accuracy"] == pytest.approx(accuracies[kept], abs=1e-4)


def test_select_by_accuracy_1se_keeps_the_latest_epoch_within_a_standard_error_of_the_best(
    tmp_path,
) -> None:
    corpus = write_router_corpus(tmp_path / "corpus")
    callbacks = TrainerCallbacks()
    config = {"select_by": "accuracy_1se", "epochs": 8, "patience": 8, "hidden": 16}
    result = train(config, corpus, tmp_path / "trm", callbacks, seed=0)
    accuracies = [e["val_accuracy"] for e in callbacks.evals]
    n = len((corpus / "val.jsonl").read_text().splitlines())
    kept, peak = 0, -1.0
    for i, score in enumerate(accuracies):
        peak = max(peak, score)
        if score >= peak - (peak * (1 - peak) / n) ** 0.5:
            kept = i
    assert result["best_epoch"] == callbacks.evals[kept]["epoch"]
    # The most accurate epoch comes earlier: plain `accuracy` would have kept a less trained one.
    first_best = accuracies.index(max(accuracies))
    assert first_best < kept
    assert result["eval"]["val_accuracy"] == pytest.approx(accuracies[kept], abs=1e-4)
