"""With `select_after_warmup: true` the trm keeps no epoch whose averaged weights are still
mostly of the learning-rate warmup (val worlds unlike the anchors may otherwise keep a barely
trained model, the constant answer); by default every epoch is a candidate."""

from __future__ import annotations

from tests.train.test_trm_selection import write_router_corpus
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train

CONFIG = {
    "epochs": 6,
    "patience": 6,
    "hidden": 16,
    "n_recursions": 1,
    "supervision_steps": 1,
    "select_after_warmup": True,
}


def test_epochs_inside_the_warmup_are_never_kept(tmp_path) -> None:
    corpus = write_router_corpus(tmp_path / "corpus", rows=320)
    # 10 steps an epoch, 60 in all: the warmup is 3 steps, the average spans 50 more.
    callbacks = TrainerCallbacks()
    result = train(CONFIG, corpus, tmp_path / "trm", callbacks, seed=0)
    assert [e["epoch"] for e in callbacks.evals] == [5]
    assert result["best_epoch"] == 5

    every = TrainerCallbacks()
    again = {key: value for key, value in CONFIG.items() if key != "select_after_warmup"}
    train(again, corpus, tmp_path / "trm-every", every, seed=0)
    assert [e["epoch"] for e in every.evals] == [0, 1, 2, 3, 4, 5]
