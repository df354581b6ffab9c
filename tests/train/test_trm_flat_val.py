"""A val split that cannot tell the trm's epochs apart (val worlds unlike the train ones,
answered alike by every epoch) does not choose the model: the trained one is kept, not the
first, barely trained epoch, and training is not stopped early for it."""

from __future__ import annotations

import json
import random
from pathlib import Path

from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train

CONFIG = {"epochs": 6, "patience": 2, "hidden": 16, "n_recursions": 1, "supervision_steps": 1}


def write_corpus(root: Path, rows: int = 240, seed: int = 0) -> Path:
    """Train rows: `strong` exactly when the prompt is hard (learnable from `hard`). Val rows:
    a world whose states hold none of the train keys, half of them labelled each way, so
    every epoch answers them alike and scores exactly 0.5 whichever candidate it prefers."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    train_rows = []
    for _ in range(rows):
        hard = rng.random()
        state = json.dumps({"hard": round(hard, 3), "turn": rng.randint(0, 9)})
        action = "strong" if hard > 0.5 else "weak"
        train_rows.append({"state": state, "tools": ["weak", "strong"], "action": action})
    val_rows = [
        {
            "state": json.dumps({"queue": "unseen"}),
            "tools": ["weak", "strong"],
            "action": "strong" if i % 2 else "weak",
        }
        for i in range(40)
    ]
    for split, out in (("train", train_rows), ("val", val_rows)):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return root


def test_a_flat_val_keeps_the_trained_model_and_trains_to_the_end(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus")
    callbacks = TrainerCallbacks()
    result = train(CONFIG, corpus, tmp_path / "trm", callbacks, seed=0)
    assert {e["val_accuracy"] for e in callbacks.evals} == {0.5}
    # Not stopped after `patience` epochs of no better val figure: every epoch ran, the last kept.
    assert [e["epoch"] for e in callbacks.evals] == list(range(CONFIG["epochs"]))
    assert result["best_epoch"] == CONFIG["epochs"] - 1 and not result["early_stopped"]
    # The model kept is the trained one: it answers the train rows far better than the first
    # epoch (the same seed stopped there), which the lowest val loss would have kept: at most a
    # quarter of its errors.
    first = train({**CONFIG, "epochs": 1}, corpus, tmp_path / "trm-1", TrainerCallbacks(), seed=0)
    kept, early = result["eval"]["train_accuracy"], first["eval"]["train_accuracy"]
    print(f"train accuracy: kept {kept}, epoch 0 {early}")
    assert 1 - kept <= (1 - early) / 4
