"""Policies: anything that answers `(state, tools) -> action` with a score per candidate (SPEC §7).

Every policy has a `name`, a `model_hash` (what the sample cache is keyed on: the same weights give
the same hash) and `scores_batch(states, tools_lists)`; `decide` and `act` are built on it.
`forward_passes` counts the model calls it made, so a test can see that a cached bench made none.

`load_policy(ref)` builds one from a resolved reference (what `bench.resolved.json` and the
evaluate stage write):
    {"type": "trm", "path": "<trainer dir with model.safetensors>"}
    {"type": "untrained_trm", "vocab_rows": "<train.jsonl>", "seed": 0, "config": {...}}
    {"type": "qlora", "path": "<adapter dir>", "contract": "action_only"|"json",
     "model_cache": "<MODEL_CACHE>"}
    {"type": "base_lm", "base_model": "smollm2-135m-instruct", "contract": ..., "model_cache": ...}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker.context import StageFailure


class Policy:
    name: str = "policy"
    model_hash: str = ""

    def __init__(self) -> None:
        self.forward_passes = 0

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        raise NotImplementedError

    def decide(self, state: str, tools: list[str]) -> tuple[str, list[float]]:
        scores = self.scores_batch([state], [tools])[0]
        return tools[argmax(scores)], scores

    def act(self, state: str, tools: list[str]) -> str:
        return self.decide(state, tools)[0]


def argmax(scores: Sequence[float]) -> int:
    """The first best index (ties go to the earlier candidate, like the oracle)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def files_hash(*paths: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


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


# ---- the tiny recursive model ------------------------------------------------------------------
class TrmModelPolicy(Policy):
    def __init__(self, trm_policy: Any, name: str, model_hash: str) -> None:
        super().__init__()
        self.inner, self.name, self.model_hash = trm_policy, name, model_hash

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        self.forward_passes += (len(states) + 255) // 256
        return self.inner.scores_batch(list(states), [list(t) for t in tools])


def load_trm_dir(path: Path) -> TrmModelPolicy:
    from worker.train.trm import CONFIG_FILE, MODEL_FILE, VOCAB_FILE, load_trm

    path = Path(path)
    files = [path / MODEL_FILE, path / CONFIG_FILE, path / VOCAB_FILE]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise StageFailure(
            "dependency",
            f"no trm model at {path}: missing {', '.join(missing)} (a completed trm train run "
            "leaves them in <run>/trainer/)",
        )
    return TrmModelPolicy(load_trm(path, device="cpu"), f"trm:{path}", files_hash(*files))


def untrained_trm(vocab_rows: Path, seed: int, config: dict[str, Any]) -> TrmModelPolicy:
    """A trm of `config` at its seeded initialization, with a vocabulary built from `vocab_rows`
    (the bench's training rows): the `none` baseline of a trm bench."""
    import torch

    from worker.train.trm import DEFAULTS, TinyRecursiveModel, Tokenizer, TrmPolicy, read_rows

    cfg = {**DEFAULTS, **config}
    rows = read_rows(Path(vocab_rows))
    tokenizer = Tokenizer.build(rows)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = TinyRecursiveModel(len(tokenizer.tokens), cfg["hidden"], cfg["n_recursions"])
    finally:
        torch.random.set_rng_state(generator_state)
    tag = json.dumps(
        {
            "untrained": seed,
            "hidden": cfg["hidden"],
            "n": cfg["n_recursions"],
            "vocab": tokenizer.tokens,
        }
    )
    inner = TrmPolicy(model, tokenizer, torch.device("cpu"))
    name = f"untrained-trm(seed={seed})"
    return TrmModelPolicy(inner, name, hashlib.sha256(tag.encode()).hexdigest())


# ---- loading from a resolved reference ---------------------------------------------------------
def load_policy(ref: dict[str, Any]) -> Policy:
    kind = ref.get("type")
    if kind == "trm":
        return load_trm_dir(Path(ref["path"]))
    if kind == "untrained_trm":
        return untrained_trm(
            Path(ref["vocab_rows"]), int(ref.get("seed", 0)), ref.get("config", {})
        )
    if kind in ("qlora", "base_lm"):
        from worker.evaluate.lm_scoring import load_lm_policy

        return load_lm_policy(ref)
    raise StageFailure("bad_input", f"unknown policy type {kind!r} in {ref}")
