"""Shared fixtures for the trainer tests: real play logs from `worker/envs`, built into a real
corpus by `worker/corpus` (no hand-written rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.schemas.corpus import CorpusSpec
from worker.corpus import build_corpus
from worker.envs import generate


@pytest.fixture(scope="session")
def route_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`route` family, 6 worlds x 60 episodes, split by episode (val: unseen episodes)."""
    root = tmp_path_factory.mktemp("route")
    generate(root / "play", families=["route"], worlds=6, episodes=60, seed=0)
    source = {"type": "trm_play_root", "name": "route", "path": str(root / "play")}
    spec = CorpusSpec.model_validate({"sources": [source], "split": {"by": "episode"}})
    build_corpus(spec, root / "corpus")
    return root / "corpus"
