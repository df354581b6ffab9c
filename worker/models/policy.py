"""A policy: anything that answers `(state, tools) -> action` with a score per candidate (SPEC §7).

Every policy has a `name`, a `model_hash` (what the sample cache is keyed on: the same weights give
the same hash) and `scores_batch(states, tools_lists)`; `decide` and `act` are built on it.
`forward_passes` counts the model calls it made, so a test can see that a cached bench made none.
This module imports no torch: the worker process stays light until a model is loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from worker.context import StageFailure


class Policy:
    name: str = "policy"
    model_hash: str = ""

    def __init__(self) -> None:
        self.forward_passes = 0

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        raise NotImplementedError

    def scores(self, state: str, tools: list[str]) -> list[float]:
        return self.scores_batch([state], [tools])[0]

    def decide(self, state: str, tools: list[str]) -> tuple[str, list[float]]:
        scores = self.scores(state, tools)
        return tools[argmax(scores)], scores

    def act(self, state: str, tools: list[str]) -> str:
        return self.decide(state, tools)[0]


def argmax(scores: Sequence[float]) -> int:
    """The first best index (ties go to the earlier candidate, like the oracle)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def model_files(folder: Path, names: Sequence[str], trainer: str) -> list[Path]:
    """The files of a saved model, or `dependency` naming the missing ones and where they come
    from."""
    files = [Path(folder) / name for name in names]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise StageFailure(
            "dependency",
            f"no {trainer} model at {folder}: missing {', '.join(missing)} (a completed "
            f"{trainer} train run leaves them in <run>/trainer/)",
        )
    return files


def files_hash(*paths: Path, extra: str = "") -> str:
    """A model's hash: its files' names and bytes (and `extra`, e.g. the answer contract)."""
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
