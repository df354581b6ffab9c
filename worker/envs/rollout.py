"""Replay any policy in a world: success, failure and recovery rates with per-episode records.

A policy is any callable `(state, tools) -> action`: `state` is the observation dict (the same
fields the play logs write as `event.state`), `tools` the candidate action ids in order.

- success: the episode is won.
- failure: the policy took an invalid action (refused, or not among the tools) or a dead end
  (a state from which nothing succeeds), or ran out of turns.
- recovery: with `force_bad_step_at=k`, turn k is replaced by a bad step chosen by the
  environment (the worst valid candidate still strictly worse than the oracle's pick that keeps the
  episode solvable; else the first invalid candidate, which the world refuses). The episode
  recovers when the policy's next action is valid and leaves a state from which the oracle still
  succeeds. `recovery_rate` is over the episodes where a bad step was forced (None when none was).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from worker.envs.base import MAX_TURNS, World

Policy = Callable[[Any, list[str]], str]


@dataclass
class EpisodeRecord:
    episode: int
    success: bool
    failure: str | None  # invalid | dead_end | turn_limit
    turns: int
    actions: list[str] = field(default_factory=list)
    forced_at: int | None = None
    forced_action: str | None = None
    recovered: bool | None = None


@dataclass
class RolloutResult:
    world_id: str
    family: str
    episodes: list[EpisodeRecord]

    @property
    def success_rate(self) -> float:
        return _share(sum(e.success for e in self.episodes), len(self.episodes))

    @property
    def failure_rate(self) -> float:
        return _share(sum(e.failure is not None for e in self.episodes), len(self.episodes))

    @property
    def recovery_rate(self) -> float | None:
        forced = [e for e in self.episodes if e.forced_at is not None]
        if not forced:
            return None
        return _share(sum(bool(e.recovered) for e in forced), len(forced))

    def to_dict(self) -> dict[str, Any]:
        return {
            "world_id": self.world_id,
            "family": self.family,
            "success_rate": self.success_rate,
            "failure_rate": self.failure_rate,
            "recovery_rate": self.recovery_rate,
            "episodes": [asdict(e) for e in self.episodes],
        }


def episode_key(seed: int, index: int) -> str:
    """The episode a rollout plays: distinct from the integer episodes of the play logs."""
    return f"rollout-{seed}-{index}"


def rollout(
    world: World,
    policy: Policy,
    episodes: int,
    seed: int = 0,
    force_bad_step_at: int | None = None,
) -> RolloutResult:
    records = [
        _episode(world, policy, i, episode_key(seed, i), force_bad_step_at) for i in range(episodes)
    ]
    return RolloutResult(world.world_id, world.family, records)


def _episode(
    world: World, policy: Policy, index: int, key: str, force_at: int | None
) -> EpisodeRecord:
    state = world.reset(key)
    record = EpisodeRecord(index, False, None, 0)
    awaiting_recovery = False
    while True:
        if world.is_success(state):
            record.success = True
            return record
        if record.turns >= MAX_TURNS:
            record.failure = "turn_limit"
            return record
        if force_at == record.turns and record.forced_at is None:
            forced = forced_bad_step(world, state)
            if forced is not None:
                record.forced_at, record.forced_action = record.turns, forced
                record.actions.append(forced)
                state, _outcome = world.apply(state, forced)
                record.turns += 1
                awaiting_recovery = True
                continue
        tools = world.candidates(state)
        action = policy(world.observation(state), list(tools))
        record.actions.append(action if isinstance(action, str) else repr(action))
        state, outcome = (
            world.apply(state, action) if isinstance(action, str) else (state, "invalid")
        )
        record.turns += 1
        if awaiting_recovery:
            record.recovered = outcome in ("ok", "success")
            awaiting_recovery = False
        if outcome in ("invalid", "dead_end"):
            record.failure = outcome
            return record


def forced_bad_step(world: World, state: Any) -> str | None:
    """The environment's bad step at `state` (see the module docstring), or None."""
    items = world.assess(state)
    best_q = items[world.oracle_index(state)].q
    worse = [
        a
        for a in items
        if a.q is not None
        and best_q is not None
        and a.q > best_q
        and not world.is_success(world.transition(state, a.action))
    ]
    if worse:
        return min(worse, key=lambda a: a.score).action
    invalid = [a for a in items if a.invalid]
    return invalid[0].action if invalid else None


# ---- reference policies --------------------------------------------------------------------
def oracle_policy(world: World) -> Policy:
    """The oracle of `world`. It needs the observations a rollout of this world hands out."""

    def act(state: Any, tools: list[str]) -> str:
        true_state = getattr(state, "true_state", None)
        if true_state is None:
            raise TypeError("oracle_policy answers only observations handed out by its world")
        return world.oracle_action(true_state)

    return act


def random_policy(seed: int = 0) -> Policy:
    """Uniform over the candidates, reproducible from `seed`."""
    rng = random.Random(seed)

    def act(state: Any, tools: list[str]) -> str:
        return rng.choice(tools)

    return act


def nth_candidate_policy(n: int) -> Policy:
    """Always the n-th candidate (0-based), the last one when there are fewer."""

    def act(state: Any, tools: list[str]) -> str:
        return tools[min(n, len(tools) - 1)]

    return act


def _share(count: int, total: int) -> float:
    return count / total if total else 0.0
