"""A tiny trm and a tiny gbdt trained once on a small aligned corpus (train, val and anchor
rows), shared by the decide tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.train.test_trm import TINY, write_aligned_corpus
from worker.train import gbdt, trm
from worker.train.callbacks import TrainerCallbacks


@dataclass(frozen=True)
class TinyRun:
    """A run folder as a train run leaves it: `corpus/` (with anchor.jsonl) and `trainer/`."""

    root: Path
    trainer: str

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    @property
    def trainer_dir(self) -> Path:
        return self.root / "trainer"


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("decide-corpus")
    write_aligned_corpus(root, rows=80, seed=0)
    # The anchors: rows of val's unseen spellings, as a corpus build holds out.
    (root / "anchor.jsonl").write_text((root / "val.jsonl").read_text())
    return root


def _run(tmp_path_factory: pytest.TempPathFactory, corpus: Path, trainer: str) -> TinyRun:
    run = TinyRun(tmp_path_factory.mktemp(f"decide-{trainer}"), trainer)
    run.corpus.mkdir()
    for name in ("train.jsonl", "val.jsonl", "anchor.jsonl"):
        (run.corpus / name).write_text((corpus / name).read_text())
    if trainer == "trm":
        # Two latent updates, two cycles, two halting steps: the export's numpy forward is held
        # to every part of the recursion.
        config = {**TINY, "n_recursions": 2, "cycles": 2, "supervision_steps": 2, "epochs": 4}
        trm.train(config, run.corpus, run.trainer_dir, TrainerCallbacks(), seed=0)
    else:
        gbdt.train({"n_estimators": 40}, run.corpus, run.trainer_dir, TrainerCallbacks(), seed=0)
    return run


@pytest.fixture(scope="session")
def trm_run(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> TinyRun:
    return _run(tmp_path_factory, tiny_corpus, "trm")


@pytest.fixture(scope="session")
def gbdt_run(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> TinyRun:
    return _run(tmp_path_factory, tiny_corpus, "gbdt")
