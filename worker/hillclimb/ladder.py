"""The generalization ladder (SPEC §8): rungs 0-5, and what a rung and a knob set do to the data.

A rung changes the data, not the scoring: it sets the split level, how many groups leave training
(`heldout_breadth`) and how hard the state is compressed. The anchors stay where the base spec put
them on every rung, so anchor scores compare across rungs.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from core.schemas.hillclimb import RUNG_NAMES, HillclimbSpec, Rung

# Rung 0 trains and validates within the same envs; each rung above widens what is held out or
# strips more of the state, ending at whole envs held out with minimal state.
DEFAULT_LADDER: tuple[Rung, ...] = (
    Rung(name="in_domain", split_by="episode", heldout_breadth=1, state_compression="full"),
    Rung(
        name="light_generalization", split_by="episode", heldout_breadth=3, state_compression="full"
    ),
    Rung(name="cross_run", split_by="run", heldout_breadth=1, state_compression="keys"),
    Rung(name="cross_env_family", split_by="env", heldout_breadth=1, state_compression="keys"),
    Rung(
        name="broad_generalization",
        split_by="env",
        heldout_breadth=2,
        state_compression="keys",
        namespace_normalization=True,
    ),
    Rung(
        name="hardest_setting",
        split_by="env",
        heldout_breadth=3,
        state_compression="minimal",
        namespace_normalization=True,
    ),
)
TOP_RUNG = len(RUNG_NAMES) - 1
DATA_KNOBS = (
    "source_mix",
    "heldout_breadth",
    "state_compression",
    "negative_rate",
    "recovery_rate",
    "namespace_normalization",
)
TRAINER_PREFIX = "trainer."


def ladder_of(spec: HillclimbSpec) -> tuple[Rung, ...]:
    return tuple(spec.ladder) if spec.ladder else DEFAULT_LADDER


def rung_label(rung: int, ladder: tuple[Rung, ...] = DEFAULT_LADDER) -> str:
    return f"{rung} {ladder[rung].name}"


def at_rung(knobs: dict[str, Any], rung: Rung) -> dict[str, Any]:
    """The knob set moved onto a rung: the rung's breadth and compression, its namespace floor."""
    moved = dict(knobs)
    moved["heldout_breadth"] = rung.heldout_breadth
    moved["state_compression"] = rung.state_compression
    if rung.namespace_normalization:
        moved["namespace_normalization"] = True
    return moved


def root_knobs(spec: HillclimbSpec) -> dict[str, Any]:
    """The first candidate: the base spec's knobs (and trainer settings being searched) on the
    start rung."""
    base_knobs = spec.base["corpus"]["knobs"]
    knobs = {name: base_knobs[name] for name in DATA_KNOBS}
    trainer = spec.base["trainer"]
    for name, values in spec.trainer_knobs.model_dump().items():
        if values:
            knobs[TRAINER_PREFIX + name] = spec.base[trainer].get(name)
    return at_rung(knobs, ladder_of(spec)[spec.start_rung])


def knob_diff(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, list[Any]]:
    """{knob: [parent value, child value]} for every knob that differs."""
    return {
        name: [parent.get(name), child.get(name)]
        for name in sorted(set(parent) | set(child))
        if parent.get(name) != child.get(name)
    }


def knobs_key(rung: int, knobs: dict[str, Any]) -> str:
    """One string per (rung, knob set): two candidates with the same key train the same thing."""
    return f"{rung}:" + json.dumps(knobs, sort_keys=True, separators=(",", ":"))


def candidate_spec(
    spec: HillclimbSpec, rung: int, knobs: dict[str, Any], name: str, seed: int
) -> dict[str, Any]:
    """The child `train` spec of one candidate: the base with the rung and the knobs applied.

    Deterministic in its inputs, so a resumed search asking again gets the same body (and the
    same run, by idempotency key).
    """
    body = copy.deepcopy(spec.base)
    body["kind"] = "train"
    body["name"] = name
    body["seed"] = seed
    body["probe"] = body.get("probe", False) or spec.probe
    corpus = body["corpus"]
    level = ladder_of(spec)[rung].split_by
    if level is not None:
        corpus["split"]["by"] = level
    corpus["split"]["anchor"] = list(spec.anchors)
    for key, value in knobs.items():
        if key.startswith(TRAINER_PREFIX):
            body[body["trainer"]][key[len(TRAINER_PREFIX) :]] = value
        else:
            corpus["knobs"][key] = value
    return body


def corpus_key(body: dict[str, Any]) -> str:
    """sha256 of the corpus part of a child spec: candidates with equal keys share a corpus."""
    text = json.dumps(body["corpus"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
