"""What a candidate would train, known before it trains: its corpus hash and its trainer config.

Training is the expensive part of a candidate; building its corpus is not. So before a candidate
is launched, the coordinator builds the corpus as a dry run (read, split, knobs, export in memory,
nothing written) to learn its content hash. Two candidates with the same corpus hash and the same
trainer config train the same model: a mutation that leaves both as its parent's cannot change
anything (`not_tried`), and a candidate that matches another finished one reuses its result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.schemas.corpus import CorpusSpec
from worker.corpus import CorpusInputError, build_corpus

# The spec keys besides the trainer's own section that change what a trainer does.
TRAINER_KEYS = ("trainer", "seed", "probe", "budget")
NOWHERE = Path("/nonexistent/hillclimb-screen")  # a dry run writes nothing, opens no out_dir


def trainer_key(body: dict[str, Any]) -> str:
    """sha256 of everything in a child `train` spec that steers its trainer (not its corpus)."""
    trainer = body["trainer"]
    steering = {key: body.get(key) for key in TRAINER_KEYS}
    steering["config"] = body.get(trainer)
    steering["contract"] = body["corpus"].get("contract", "action_only")
    text = json.dumps(steering, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Screen:
    """A candidate's corpus hash and what each knob did to the corpus (the manifest's effects)."""

    corpus_hash: str
    effects: dict[str, Any] = field(default_factory=dict)

    def effect_of(self, knobs: list[str]) -> str:
        """The recorded effect of the knobs named, for a reason a person reads."""
        shown = [
            f"{name}: {json.dumps(self.effects[name], sort_keys=True)}"
            for name in knobs
            if name in self.effects
        ]
        return "; ".join(shown)


def screen_corpus(body: dict[str, Any]) -> Screen | None:
    """The corpus a child spec would build, as a dry run; None when it cannot be built here (the
    candidate then runs and its own `prepare_corpus` reports why)."""
    try:
        spec = CorpusSpec.model_validate(body["corpus"])
        result = build_corpus(spec, NOWHERE, dry_run=True)
    except (CorpusInputError, ValueError, OSError):
        return None
    effects = (result.manifest.get("knobs") or {}).get("effects") or {}
    return Screen(result.corpus_hash, effects)
