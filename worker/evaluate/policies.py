"""Policies for evaluation (SPEC §7): the reference policies, and `load_policy(ref)`, which builds
a policy from a resolved reference (what `bench.resolved.json` and the evaluate stage write):
    {"type": "trm", "path": "<trainer dir with model.safetensors>"}
    {"type": "untrained_trm", "vocab_rows": "<train.jsonl>", "seed": 0, "config": {...}}
    {"type": "qlora", "path": "<adapter dir>", "contract": "action_only"|"json",
     "model_cache": "<MODEL_CACHE>"}
    {"type": "base_lm", "base_model": "smollm2-135m-instruct", "contract": ..., "model_cache": ...}

`LOADERS` maps each type to its loader. A loader imports its model on use: importing this module
imports no torch, so the worker process stays light until a stage loads a model. What a policy is
(`Policy`, `argmax`) lives in `worker/models/policy.py`, under the models and this module both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from worker.context import StageFailure
from worker.models.policy import Policy


# ---- reference policies (tests, sanity checks) -------------------------------------------------
class ConstantPolicy(Policy):
    """Always the same action id when offered, else the candidate at `index`."""

    def __init__(self, action: str | None = None, index: int = 0) -> None:
        super().__init__()
        self.action, self.index = action, index
        self.name = f"constant:{action if action is not None else index}"
        self.model_hash = hashlib.sha256(self.name.encode()).hexdigest()

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        out = []
        for options in tools:
            pick = (
                options.index(self.action)
                if self.action in options
                else min(self.index, len(options) - 1)
            )
            out.append([1.0 if i == pick else 0.0 for i in range(len(options))])
        return out


class TablePolicy(Policy):
    """Answers from a table of (state, tools) -> action: the oracle for labelled rows."""

    def __init__(self, rows: Sequence[dict[str, Any]], name: str = "oracle") -> None:
        super().__init__()
        self.table = {(r["state"], tuple(r["tools"])): r["action"] for r in rows}
        self.name = name
        self.model_hash = hashlib.sha256(
            json.dumps(sorted(map(str, self.table.items()))).encode()
        ).hexdigest()

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        out = []
        for state, options in zip(states, tools, strict=True):
            right = self.table.get((state, tuple(options)))
            out.append([1.0 if t == right else 0.0 for t in options])
        return out


# ---- loading from a resolved reference ---------------------------------------------------------
def _trm(ref: dict[str, Any]) -> Policy:
    from worker.models.trm import load_trm

    return load_trm(Path(ref["path"]), device="cpu")


def _untrained_trm(ref: dict[str, Any]) -> Policy:
    from worker.models.trm import untrained_trm

    return untrained_trm(Path(ref["vocab_rows"]), int(ref.get("seed", 0)), ref.get("config", {}))


def _gbdt(ref: dict[str, Any]) -> Policy:
    from worker.models.gbdt import load

    return load(Path(ref["path"]))


def _lm(ref: dict[str, Any]) -> Policy:
    from worker.evaluate.lm_scoring import load_lm_policy

    return load_lm_policy(ref)


LOADERS: dict[str, Callable[[dict[str, Any]], Policy]] = {
    "trm": _trm,
    "untrained_trm": _untrained_trm,
    "gbdt": _gbdt,
    "qlora": _lm,
    "base_lm": _lm,
}


def load_policy(ref: dict[str, Any]) -> Policy:
    kind = ref.get("type")
    if kind not in LOADERS:
        raise StageFailure("bad_input", f"unknown policy type {kind!r} in {ref}")
    return LOADERS[kind](ref)
