"""Controller environments (SPEC §5): seeded task families that write play logs and replay policies.

- `families`: the menu (`FAMILIES`) and `make_world(family, seed, index)`.
- `base`: the contract a family implements, and the oracle/labels derived from it.
- `route`, `grid`, `rebalance`, `schedule`, `verify`: one module per family.
- `play`: oracle play with labelled bad steps; `writers`: the three log formats;
  `generate`: families x worlds x episodes -> files; `benchdata`: the shipped benches' data.
- `rollout`: run any policy `(state, tools) -> action` and measure success, failure, recovery.

How a state is read by the controllers, and how to shape your own logs' states to be read well:
docs/state-rules.md.
"""

from worker.envs.base import Assessment, Observation, World
from worker.envs.benchdata import ensure_bench_data, load_bench
from worker.envs.families import FAMILIES, make_world, make_worlds, world_id
from worker.envs.generate import Generated, generate
from worker.envs.play import Turn, play_episode
from worker.envs.rollout import (
    EpisodeRecord,
    RolloutResult,
    nth_candidate_policy,
    oracle_policy,
    random_policy,
    rollout,
)
from worker.envs.writers import FORMATS

__all__ = [
    "FAMILIES",
    "FORMATS",
    "Assessment",
    "EpisodeRecord",
    "Generated",
    "Observation",
    "RolloutResult",
    "Turn",
    "World",
    "ensure_bench_data",
    "generate",
    "load_bench",
    "make_world",
    "make_worlds",
    "nth_candidate_policy",
    "oracle_policy",
    "play_episode",
    "random_policy",
    "rollout",
    "world_id",
]
