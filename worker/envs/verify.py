"""`verify`: accept or reject proposed solutions to episodes of another family's world.

Each verify world reviews one source world (of `route`, `grid`, `rebalance` or `schedule`). An
episode is a queue of proposals: the oracle's action list for a source episode, or that list
corrupted (one action replaced, one dropped, or two swapped). Whether a proposal is sound is
decided by replaying it in the source world, never by how it was made: a corruption that still
solves the episode is sound. The verifier sees the whole source instance and the proposal.

A wrong verdict loses the episode (a dead end). `escalate` hands a proposal to a human: always
safe but costly, and invalid once the world's escalations are used up.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from worker.envs.base import MAX_TURNS, World, pick_style, seeded_rng
from worker.envs.grid import GridWorld
from worker.envs.rebalance import RebalanceWorld
from worker.envs.route import RouteWorld
from worker.envs.schedule import ScheduleWorld

SOURCES: dict[str, Any] = {
    "route": RouteWorld,
    "grid": GridWorld,
    "rebalance": RebalanceWorld,
    "schedule": ScheduleWorld,
}
TAGS = ["verdict:accept", "verdict:reject", "escalate"]
STYLES = [
    dict(zip(TAGS, ["accept", "reject", "escalate"], strict=True)),
    dict(zip(TAGS, ["approve", "deny", "defer"], strict=True)),
    dict(zip(TAGS, ["yes", "no", "ask_human"], strict=True)),
    dict(zip(TAGS, ["ACCEPT", "REJECT", "HUMAN"], strict=True)),
    dict(zip(TAGS, ["ok", "fail", "flag"], strict=True)),
]


@dataclass(frozen=True, slots=True)
class Proposal:
    instance: str  # the source instance, JSON text (kept as text so the item is hashable)
    actions: tuple[str, ...]
    sound: bool
    corruption: str | None  # how it was made: None (oracle), "replace", "drop", "swap"


@dataclass(frozen=True, slots=True)
class VerifyState:
    episode: str
    index: int
    escalations_left: int
    failed: bool = False


class VerifyWorld(World):
    family = "verify"

    def __init__(
        self,
        world_id: str,
        *,
        source: World,
        queue: tuple[int, int],
        escalations: int,
        bad_rate: float,
        style: dict[str, str],
        order: list[str],
    ):
        self.source, self.queue, self.escalations, self.bad_rate = (
            source,
            queue,
            escalations,
            bad_rate,
        )
        self._verdict = {style[tag]: tag for tag in order}
        params = {
            "source_family": source.family,
            "source_world": source.world_id,
            "source_params": source.params,
            "queue": list(queue),
            "escalations": escalations,
            "bad_rate": bad_rate,
        }
        super().__init__(world_id, {style[tag]: tag for tag in order}, params)
        self._proposals: dict[str, tuple[Proposal, ...]] = {}

    @classmethod
    def generate(cls, world_id: str, rng: random.Random, source_family: str | None = None):
        family = source_family or rng.choice(sorted(SOURCES))
        source = SOURCES[family].generate(f"{world_id}.src", rng)
        order = list(TAGS)
        rng.shuffle(order)
        low = rng.randint(3, 5)
        return cls(
            world_id,
            source=source,
            queue=(low, rng.randint(low, 6)),
            escalations=rng.randint(0, 2),
            bad_rate=rng.choice([0.3, 0.5, 0.7]),
            style=pick_style(rng, STYLES),
            order=order,
        )

    # ---- proposals -----------------------------------------------------------------------
    def proposals(self, episode: str) -> tuple[Proposal, ...]:
        known = self._proposals.get(episode)
        if known is None:
            rng = seeded_rng(self.world_id, "episode", episode)
            known = tuple(
                self._propose(rng, f"{episode}:{k}") for k in range(rng.randint(*self.queue))
            )
            self._proposals[episode] = known
        return known

    def _propose(self, rng: random.Random, source_episode: str) -> Proposal:
        source = self.source
        start = source.reset(source_episode)
        states: list[Any] = [start]
        actions: list[str] = []
        while not source.is_terminal(states[-1]) and len(actions) < MAX_TURNS:
            action = source.oracle_action(states[-1])
            actions.append(action)
            states.append(source.transition(states[-1], action))
        corruption = None
        if rng.random() < self.bad_rate:
            # Swaps of commuting steps are often still sound, so they are the rarer corruption.
            kinds = ["replace", "replace", "drop", "swap"] if len(actions) > 1 else ["replace"]
            corruption = rng.choice(kinds)
            j = rng.randrange(len(actions) - (1 if corruption == "swap" else 0))
            if corruption == "replace":
                others = [a for a in source.candidates(states[j]) if a != actions[j]]
                actions[j] = rng.choice(others)
            elif corruption == "drop":
                del actions[j]
            else:
                actions[j], actions[j + 1] = actions[j + 1], actions[j]
        instance = json.dumps(source.describe(start), sort_keys=True, separators=(",", ":"))
        return Proposal(instance, tuple(actions), self.replay(start, actions), corruption)

    def replay(self, start: Any, actions: list[str] | tuple[str, ...]) -> bool:
        """True when `actions` solve the source episode from `start` and nothing is left over."""
        state = start
        for action in actions:
            if self.source.is_terminal(state):
                return False
            state, outcome = self.source.apply(state, action)
            if outcome in ("invalid", "dead_end"):
                return False
        return self.source.is_success(state)

    # ---- mechanics -----------------------------------------------------------------------
    def reset(self, episode: int | str) -> VerifyState:
        key = str(episode)
        self.proposals(key)
        return VerifyState(key, 0, self.escalations)

    def candidates(self, state: VerifyState) -> list[str]:
        return list(self.action_tags)

    def why_invalid(self, state: VerifyState, action: str) -> str | None:
        if self._verdict[action] == "escalate" and state.escalations_left == 0:
            return "no escalations left"
        return None

    def transition(self, state: VerifyState, action: str) -> VerifyState:
        verdict = self._verdict[action]
        if verdict == "escalate":
            return VerifyState(state.episode, state.index + 1, state.escalations_left - 1)
        sound = self.proposals(state.episode)[state.index].sound
        wrong = sound != (verdict == "verdict:accept")
        return VerifyState(state.episode, state.index + 1, state.escalations_left, wrong)

    def step_cost(self, state: VerifyState, action: str) -> float:
        return 1.0 if self._verdict[action] == "escalate" else 0.0

    def cost_to_go(self, state: VerifyState) -> float | None:
        return None if state.failed else 0.0

    def is_success(self, state: VerifyState) -> bool:
        return not state.failed and state.index == len(self.proposals(state.episode))

    def observe(self, state: VerifyState) -> dict[str, Any]:
        queue = self.proposals(state.episode)
        if state.index >= len(queue):
            return {"source_family": self.source.family, "proposal": None, "items_left": 0}
        proposal = queue[state.index]
        return {
            "source_family": self.source.family,
            "instance": json.loads(proposal.instance),
            "proposal": list(proposal.actions),
            "tags": {a: self.source.action_tags.get(a, a) for a in sorted(set(proposal.actions))},
            "items_left": len(queue) - state.index,
            "escalations_left": state.escalations_left,
        }
