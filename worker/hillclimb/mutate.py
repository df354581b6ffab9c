"""Local mutation (SPEC §8): the next candidate changes one or two knobs of its parent, each by
one step along that knob's range. Deterministic in (seed, candidate index), so a resumed search
proposes exactly what the interrupted one would have."""

from __future__ import annotations

import random
from typing import Any

from core.schemas.hillclimb import HillclimbSpec
from worker.hillclimb.ladder import TRAINER_PREFIX, knobs_key

TWO_KNOB_SHARE = 0.3  # how often a candidate turns two knobs instead of one
TRIES = 40


def ranges_of(spec: HillclimbSpec) -> dict[str, list[Any]]:
    """Every knob the search may turn, with its ordered values (two or more)."""
    found: dict[str, list[Any]] = {}
    for name, values in spec.knobs.model_dump().items():
        if len(values) >= 2:
            found[name] = values
    for name, values in spec.trainer_knobs.model_dump().items():
        if len(values) >= 2:
            found[TRAINER_PREFIX + name] = values
    return found


def _neighbours(values: list[Any], current: Any) -> list[Any]:
    """The values one step from `current`; from outside the range, the nearest ends."""
    if current in values:
        i = values.index(current)
        return [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]
    numeric = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if isinstance(current, int | float) and numeric and len(numeric) == len(values):
        nearest = min(values, key=lambda v: abs(v - current))
        return [nearest]
    return [values[0]]


def mutate(
    parent: dict[str, Any],
    ranges: dict[str, list[Any]],
    rung: int,
    seed: int,
    index: int,
    tried: set[str],
) -> dict[str, Any] | None:
    """A knob set one or two local steps from `parent` not tried on this rung, or None when the
    neighbourhood is exhausted."""
    rng = random.Random(f"{seed}:{index}")
    names = sorted(ranges)
    if not names:
        return None
    for attempt in range(TRIES):
        count = (
            2 if len(names) > 1 and (rng.random() < TWO_KNOB_SHARE or attempt >= TRIES // 2) else 1
        )
        child = dict(parent)
        for name in rng.sample(names, count):
            options = [
                v for v in _neighbours(ranges[name], child.get(name)) if v != child.get(name)
            ]
            if options:
                child[name] = rng.choice(options)
        if child != parent and knobs_key(rung, child) not in tried:
            return child
    # Random draws missed: walk every single step in a fixed order before giving up.
    for name in names:
        for value in _neighbours(ranges[name], parent.get(name)):
            child = {**parent, name: value}
            if child != parent and knobs_key(rung, child) not in tried:
                return child
    return None
