"""Rollout metrics match hand computations; the oracle recovers from every forced bad step."""

from __future__ import annotations

import pytest

from worker.envs import make_world, nth_candidate_policy, oracle_policy, random_policy, rollout
from worker.envs.grid import GridWorld
from worker.envs.rollout import episode_key

# Two starts: from (0,0) going south twice reaches G; from (2,0) south is the pit.
FORK = ["S.S", "..~", "G.."]
EPISODES = 20


def starts(world: GridWorld) -> list[tuple[int, int]]:
    return [world.reset(episode_key(0, i)).pos for i in range(EPISODES)]


def test_second_candidate_policy_metrics_match_a_hand_computation() -> None:
    world = GridWorld.from_rows("grid-fork", FORK, slack=0)
    assert list(world.action_tags) == ["move_n", "move_s", "move_e", "move_w"]
    left = [pos == (0, 0) for pos in starts(world)]
    assert 0 < sum(left) < EPISODES  # both starts are drawn, so both outcomes are exercised

    result = rollout(world, nth_candidate_policy(1), EPISODES, seed=0)

    for record, from_left in zip(result.episodes, left, strict=True):
        if from_left:  # move_s, move_s: on the goal
            assert (record.success, record.failure, record.turns) == (True, None, 2)
            assert record.actions == ["move_s", "move_s"]
        else:  # move_s: into the pit
            assert (record.success, record.failure, record.turns) == (False, "dead_end", 1)
    assert result.success_rate == sum(left) / EPISODES
    assert result.failure_rate == 1 - sum(left) / EPISODES
    assert result.recovery_rate is None  # nothing was forced


def test_forced_bad_step_and_recovery_match_a_hand_computation() -> None:
    world = GridWorld.from_rows("grid-fork", FORK, slack=2)
    left = [pos == (0, 0) for pos in starts(world)]

    result = rollout(world, nth_candidate_policy(1), EPISODES, seed=0, force_bad_step_at=0)

    for record, from_left in zip(result.episodes, left, strict=True):
        assert record.forced_at == 0
        if from_left:
            # forced east (the only worse move), then south recovers, south, south hits the edge
            assert record.actions == ["move_e", "move_s", "move_s", "move_s"]
            assert (record.recovered, record.failure, record.turns) == (True, "invalid", 4)
        else:
            # west is the only viable move and it is the best, so the forced step is the first
            # invalid candidate (refused); then south is the pit
            assert record.actions == ["move_n", "move_s"]
            assert (record.recovered, record.failure, record.turns) == (False, "dead_end", 2)
    assert result.success_rate == 0.0
    assert result.failure_rate == 1.0
    assert result.recovery_rate == sum(left) / EPISODES


@pytest.mark.parametrize("family", ["route", "grid", "rebalance", "schedule", "verify"])
def test_oracle_recovers_from_every_forced_bad_step(family: str) -> None:
    forced = 0
    for index in range(3):
        world = make_world(family, 21, index)
        result = rollout(world, oracle_policy(world), 15, seed=1, force_bad_step_at=1)
        assert result.success_rate == 1.0
        forced += sum(e.forced_at is not None for e in result.episodes)
        assert result.recovery_rate in (None, 1.0)
    assert forced > 0


def test_random_policy_recovers_less_often_than_the_oracle() -> None:
    recovered = forced = 0
    for index in range(4):
        world = make_world("grid", 21, index)
        result = rollout(world, random_policy(index), 25, seed=1, force_bad_step_at=1)
        forced += sum(e.forced_at is not None for e in result.episodes)
        recovered += sum(bool(e.recovered) for e in result.episodes)
    assert forced > 50 and recovered / forced < 0.8


def test_an_action_outside_the_tools_is_an_invalid_failure() -> None:
    world = make_world("grid", 0, 0)
    result = rollout(world, lambda state, tools: "teleport", 3)
    assert [e.failure for e in result.episodes] == ["invalid"] * 3
    assert result.to_dict()["failure_rate"] == 1.0


def test_policies_see_the_logged_state_fields_and_candidate_ids() -> None:
    world = make_world("rebalance", 0, 1)
    seen = []

    def spy(state, tools):
        seen.append((dict(state), list(tools)))
        return tools[0]

    rollout(world, spy, 1)
    state, tools = seen[0]
    assert state == world.observe(world.reset(episode_key(0, 0)))
    assert tools == list(world.action_tags)


def test_oracle_policy_refuses_states_it_cannot_trace_back() -> None:
    world = make_world("grid", 0, 0)
    with pytest.raises(TypeError, match="observations handed out by its world"):
        oracle_policy(world)({"pos": [0, 0]}, ["N"])
