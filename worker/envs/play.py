"""Play: episodes of oracle play with a share of deliberate bad steps, every step labelled.

With probability `noise` a step is a bad pick (when the state offers one): an `invalid` candidate
(refused, the state stays), a `suboptimal` one (valid but strictly worse than the oracle's pick;
sometimes a dead end, which ends the episode). The step right after a bad pick that did not end
the episode is the oracle's pick, labelled `recovery`. All other steps are `oracle`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from worker.envs.base import MAX_TURNS, Assessment, World, seeded_rng

# How a bad step is chosen, among the kinds the state offers.
BAD_MIX = {"invalid": 0.4, "worse": 0.45, "dead_end": 0.15}


@dataclass(frozen=True, slots=True)
class Turn:
    episode: int
    turn: int
    state: Any
    assessments: list[Assessment]
    pick: int
    oracle_pick: int
    kind: str  # oracle | suboptimal | invalid | recovery
    outcome: str  # ok | success | invalid | dead_end
    last: bool  # no turn of this episode follows

    @property
    def action(self) -> str:
        return self.assessments[self.pick].action


def play_episode(world: World, episode: int, noise: float = 0.0) -> list[Turn]:
    rng = seeded_rng(world.world_id, "play", episode, noise)
    state = world.reset(episode)
    turns: list[Turn] = []
    after_bad = False
    while not world.is_terminal(state) and len(turns) < MAX_TURNS:
        items = world.assess(state)
        best = world.oracle_index(state)
        pick, kind = best, ("recovery" if after_bad else "oracle")
        if not after_bad and noise > 0 and rng.random() < noise:
            bad = bad_pick(items, best, rng)
            if bad is not None:
                pick, kind = bad
        nxt, outcome = world.apply(state, items[pick].action)
        turns.append(Turn(episode, len(turns), state, items, pick, best, kind, outcome, False))
        after_bad = kind in ("invalid", "suboptimal")
        state = nxt
    if turns:
        turns[-1] = replace(turns[-1], last=True)
    return turns


def bad_pick(items: list[Assessment], best: int, rng: random.Random) -> tuple[int, str] | None:
    """(index, kind) of a bad candidate drawn by BAD_MIX among those present, or None."""
    best_q = items[best].q
    groups = {
        "invalid": [i for i, a in enumerate(items) if a.invalid],
        "worse": [
            i
            for i, a in enumerate(items)
            if a.q is not None and best_q is not None and a.q > best_q
        ],
        "dead_end": [i for i, a in enumerate(items) if a.dead_end],
    }
    present = [name for name in BAD_MIX if groups[name]]
    if not present:
        return None
    name = rng.choices(present, weights=[BAD_MIX[n] for n in present])[0]
    return rng.choice(groups[name]), ("invalid" if name == "invalid" else "suboptimal")
