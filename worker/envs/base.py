"""The contract every environment family implements, and the candidate scoring built on it.

A family supplies the mechanics of one world: the start state of an episode, the candidate
actions at a state, why a candidate is invalid (the world refuses it), the transition, the cost of
a step, and an exact `cost_to_go` (None when no continuation succeeds: a dead end). Everything
else (the oracle, per-candidate labels and scores) is derived here, the same way for every family,
so "oracle", "invalid" and "dead end" mean one thing across the package.

The oracle takes the valid, non-dead-end candidate with the lowest `step_cost + cost_to_go` of the
state it leads to, the first one in candidate order on ties. Because `cost_to_go` is exact about
solvability, the oracle never leaves a solvable state and succeeds in every episode.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

# A guard against families that never terminate; every shipped family ends well before it.
MAX_TURNS = 200


def seeded_rng(*parts: object) -> random.Random:
    """A generator seeded from a string, so the stream is the same in every process
    (string seeds do not depend on PYTHONHASHSEED)."""
    return random.Random("|".join(str(part) for part in parts))


@dataclass(frozen=True, slots=True)
class Assessment:
    """What the environment knows about one candidate at one state."""

    action: str
    tag: str
    invalid_reason: str | None
    dead_end: bool
    # step cost + cost to go of the next state; None for invalid and dead-end candidates.
    q: float | None
    # 1.0 for the best candidates, 1 / (1 + extra cost) for worse ones, 0.0 for invalid/dead end.
    score: float

    @property
    def invalid(self) -> bool:
        return self.invalid_reason is not None

    @property
    def viable(self) -> bool:
        return self.q is not None


class Observation(dict):
    """What a policy sees: a plain JSON-able dict, carrying the true state for the oracle.

    Policies read it as a dict (or serialize it); only `oracle_policy` looks at `true_state`.
    """

    __slots__ = ("true_state",)

    def __init__(self, fields: dict[str, Any], true_state: Any) -> None:
        super().__init__(fields)
        self.true_state = true_state


class World(ABC):
    """One seeded world of a family. States are immutable and hashable."""

    family: ClassVar[str]

    def __init__(self, world_id: str, action_tags: dict[str, str], params: dict[str, Any]):
        self.world_id = world_id
        # Every action id this world can offer, in candidate order, mapped to its shared tag.
        self.action_tags = action_tags
        # The world's rules, JSON-able, written next to its play log as world.json.
        self.params = params
        self._assessments: dict[Any, list[Assessment]] = {}

    # ---- what a family implements -------------------------------------------------------
    @classmethod
    def generate(cls, world_id: str, rng: random.Random) -> World:
        """A new world with rules drawn from `rng`."""
        raise NotImplementedError

    @abstractmethod
    def reset(self, episode: int | str) -> Any:
        """The start state of an episode; the same episode key always gives the same state."""

    @abstractmethod
    def candidates(self, state: Any) -> list[str]:
        """The action ids offered at `state`, in a fixed order."""

    @abstractmethod
    def why_invalid(self, state: Any, action: str) -> str | None:
        """A short reason when the world refuses `action` at `state`, else None."""

    @abstractmethod
    def transition(self, state: Any, action: str) -> Any:
        """The next state after a valid action."""

    @abstractmethod
    def step_cost(self, state: Any, action: str) -> float:
        """What taking a valid action costs (the oracle minimizes cost + cost to go)."""

    @abstractmethod
    def cost_to_go(self, state: Any) -> float | None:
        """The oracle's remaining cost from `state`, 0 at success, None when nothing succeeds."""

    @abstractmethod
    def is_success(self, state: Any) -> bool:
        """True when the episode has been won."""

    @abstractmethod
    def observe(self, state: Any) -> dict[str, Any]:
        """The decision-relevant fields of `state`, compact and JSON-able."""

    def describe(self, state: Any) -> dict[str, Any]:
        """The whole instance from `state` (what a verifier needs to check a full solution)."""
        return self.observe(state)

    # ---- derived, the same for every family ---------------------------------------------
    def observation(self, state: Any) -> Observation:
        return Observation(self.observe(state), state)

    def is_terminal(self, state: Any) -> bool:
        return self.is_success(state) or self.cost_to_go(state) is None

    def assess(self, state: Any) -> list[Assessment]:
        """Every candidate at `state` with its invalid reason, dead-end flag, cost and score."""
        cached = self._assessments.get(state)
        if cached is not None:
            return cached
        raw: list[tuple[str, str | None, bool, float | None]] = []
        for action in self.candidates(state):
            reason = self.why_invalid(state, action)
            if reason is not None:
                raw.append((action, reason, False, None))
                continue
            rest = self.cost_to_go(self.transition(state, action))
            if rest is None:
                raw.append((action, None, True, None))
            else:
                raw.append((action, None, False, self.step_cost(state, action) + rest))
        viable = [q for _a, _r, _d, q in raw if q is not None]
        best = min(viable) if viable else 0.0
        result = [
            Assessment(
                action=action,
                tag=self.action_tags.get(action, action),
                invalid_reason=reason,
                dead_end=dead,
                q=q,
                score=0.0 if q is None else round(1.0 / (1.0 + q - best), 4),
            )
            for action, reason, dead, q in raw
        ]
        if len(self._assessments) > 200_000:
            self._assessments.clear()
        self._assessments[state] = result
        return result

    def oracle_index(self, state: Any) -> int:
        """Index of the oracle's pick among `candidates(state)`."""
        best_i, best_q = -1, 0.0
        for i, item in enumerate(self.assess(state)):
            if item.q is not None and (best_i < 0 or item.q < best_q):
                best_i, best_q = i, item.q
        if best_i < 0:
            raise ValueError(f"{self.world_id}: no viable candidate at a state the oracle reached")
        return best_i

    def oracle_action(self, state: Any) -> str:
        return self.assess(state)[self.oracle_index(state)].action

    def apply(self, state: Any, action: str) -> tuple[Any, str]:
        """(next state, outcome) for any action: `invalid` leaves the state as it was;
        otherwise `dead_end` (nothing succeeds from the next state), `success` or `ok`."""
        if action not in self.candidates(state) or self.why_invalid(state, action) is not None:
            return state, "invalid"
        nxt = self.transition(state, action)
        if self.cost_to_go(nxt) is None:
            return nxt, "dead_end"
        return nxt, ("success" if self.is_success(nxt) else "ok")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.world_id}>"


def pick_style(rng: random.Random, styles: list[dict[str, str]]) -> dict[str, str]:
    """One of a family's action namespaces (shared tag -> this world's id)."""
    return dict(styles[rng.randrange(len(styles))])
