"""Every family is a real task: the oracle always wins, chance play mostly loses, worlds differ."""

from __future__ import annotations

import pytest

from worker.envs import make_world, oracle_policy, random_policy, rollout

FAMILIES = ["route", "grid", "rebalance", "schedule", "verify"]

WORLDS = 4
EPISODES = 25


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_wins_every_episode_in_every_world(family: str) -> None:
    for index in range(WORLDS):
        world = make_world(family, 11, index)
        result = rollout(world, oracle_policy(world), EPISODES, seed=3)
        assert result.success_rate == 1.0, (world.world_id, result.to_dict())
        assert result.failure_rate == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_random_policy_scores_far_below_the_oracle(family: str) -> None:
    wins = episodes = 0
    for index in range(WORLDS):
        world = make_world(family, 11, index)
        result = rollout(world, random_policy(seed=index), EPISODES, seed=3)
        wins += sum(e.success for e in result.episodes)
        episodes += len(result.episodes)
        assert all(e.success or e.failure in ("invalid", "dead_end") for e in result.episodes)
    # The oracle scores 1.0 on the same episodes; chance must be far off.
    assert wins / episodes <= 0.3, (family, wins, episodes)


@pytest.mark.parametrize("family", FAMILIES)
def test_worlds_differ_in_rules_and_action_namespace(family: str) -> None:
    worlds = [make_world(family, 5, index) for index in range(8)]
    assert len({repr(w.params) for w in worlds}) == 8
    namespaces = {tuple(sorted(w.action_tags)) for w in worlds}
    assert len(namespaces) >= 3, namespaces
    # The shared tags are what lets a corpus map one namespace onto another.
    assert all(
        ":" in tag or tag in ("wait", "hold", "escalate")
        for w in worlds
        for tag in w.action_tags.values()
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_same_world_id_rebuilds_the_same_world(family: str) -> None:
    first, again = make_world(family, 7, 2), make_world(family, 7, 2)
    assert first.world_id == again.world_id == f"{family}-s7-w2"
    assert first.params == again.params and first.action_tags == again.action_tags
    assert first.observe(first.reset(4)) == again.observe(again.reset(4))
    assert make_world(family, 8, 2).params != first.params


def test_unknown_family_is_refused_by_name() -> None:
    with pytest.raises(KeyError, match="unknown family 'chess'"):
        make_world("chess", 0, 0)
