"""Failure and recovery rates from rollouts of a policy in the anchor worlds (SPEC §5, §7).

The policy must see states shaped like its training rows, so the rollout's observation is turned
into the row a source reader would have made from the play log (the same fields, the same compact
JSON), then through the same knobs the corpus applied (`state_compression`,
`namespace_normalization`). Supported sources: `trm_play_root` (the trace event), `router_jsonl`
(the router's input features; candidates are the source's route names) and `jsonl` in
`reasoning_trace` mode (its `state_fields` read from the trace shape).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from worker.corpus import knobs as corpus_knobs
from worker.corpus.sources import compact_json, dig
from worker.envs import FAMILIES, make_world, rollout
from worker.envs.base import World
from worker.envs.families import SUMMARIES
from worker.envs.writers import router_features
from worker.models.policy import Policy

WORLD_ID = re.compile(r"^(?P<family>[a-z]+)-s(?P<seed>\d+)-w(?P<index>\d+)$")
EPISODES = 20
FORCE_AT = 1


def env_world(world_id: str | None) -> World | None:
    """The worker/envs world a row's `world_id` names, or None when it names none."""
    match = WORLD_ID.match(world_id or "")
    if match is None or match["family"] not in FAMILIES:
        return None
    return make_world(match["family"], int(match["seed"]), int(match["index"]))


def replayable(source: dict[str, Any] | None) -> bool:
    """Whether rollout states can be shaped like `source`'s rows. A `jsonl` export in `normalized`
    mode (a verifiers environment's results) has states in its own shape, which no rollout can
    reproduce: its rates come from its tagged rows instead."""
    if not source:
        return False
    return source.get("type") != "jsonl" or source.get("mode") == "reasoning_trace"


class Shaper:
    """Observation -> (state text, candidate list) as the corpus rows of `source` read."""

    def __init__(
        self,
        world: World,
        source: dict[str, Any],
        knobs: dict[str, Any],
        router_routes: list[str] | None = None,
    ) -> None:
        self.world, self.source, self.knobs = world, source, knobs
        self.router_routes = router_routes
        self.calls = 0

    def raw_state(self, obs: Any) -> dict[str, Any]:
        world, true_state = self.world, obs.true_state
        kind = self.source.get("type")
        if kind == "router_jsonl":
            return router_features(obs)
        if kind == "jsonl":
            items = world.assess(true_state)
            trace = {
                "task": {
                    "family": world.family,
                    "world_id": world.world_id,
                    "goal": SUMMARIES[world.family],
                },
                "observation": dict(obs),
                "options": {"ids": [a.action for a in items], "tags": [a.tag for a in items]},
            }
            return {
                p.rsplit(".", 1)[-1]: dig(trace, p) for p in self.source.get("state_fields", [])
            }
        items = world.assess(true_state)
        rest = world.cost_to_go(true_state)
        self.calls += 1
        parts = {
            "encounter_id": f"{world.world_id}/rollout/t{self.calls}",
            "metrics": {"desirability": round(1.0 / (1.0 + (rest or 0.0)), 4)},
            "latent_norm": round(math.sqrt(sum(a.score**2 for a in items)), 4),
            "state": dict(obs),
        }
        return {k: v for k, v in parts.items() if v not in (None, {}, [], "")}

    def __call__(self, obs: Any, tools: list[str]) -> tuple[str, list[str], Callable[[str], str]]:
        raw = self.raw_state(obs)
        text = compact_json(raw)
        level = self.knobs.get("state_compression", "full")
        if level != "full":
            squeezed = corpus_knobs.compress_state(
                text, raw, level, list(self.knobs.get("state_keys") or [])
            )
            text = squeezed if squeezed is not None else text
        if self.source.get("type") == "router_jsonl":
            route_of: dict[str, str] = getattr(self.world, "route_of", {})
            back = {canonical: raw_id for raw_id, canonical in route_of.items()}
            shown = self.router_routes or sorted(back)
            return text, shown, lambda pick: back.get(pick, pick)
        shown = list(tools)
        if self.knobs.get("namespace_normalization"):
            auto = self.knobs.get("namespace_normalization") == "auto"
            tagged = corpus_knobs.normalize_namespace(
                tools,
                tools[0],
                self.world.world_id,
                dict(self.knobs.get("namespace_map") or {}),
                dict(self.world.action_tags) if auto else None,
            )
            if tagged is not None:
                shown = tagged[0]
        return text, shown, lambda pick: tools[shown.index(pick)] if pick in shown else pick


def world_rates(
    policy: Policy,
    world: World,
    source: dict[str, Any],
    knobs: dict[str, Any],
    episodes: int = EPISODES,
    seed: int = 0,
    router_routes: list[str] | None = None,
) -> dict[str, Any]:
    """Rollouts of `policy` in `world`: plain episodes (success, failure) and episodes with a
    forced bad step at turn FORCE_AT (recovery)."""
    shaper = Shaper(world, source, knobs, router_routes)

    def act(obs: Any, tools: list[str]) -> str:
        text, shown, back = shaper(obs, tools)
        return back(policy.act(text, shown))

    plain = rollout(world, act, episodes, seed=seed)
    forced = rollout(world, act, episodes, seed=seed + 1, force_bad_step_at=FORCE_AT)
    return {
        "world": world.world_id,
        "family": world.family,
        "episodes": len(plain.episodes),
        "success": [float(e.success) for e in plain.episodes],
        "failure": [float(e.failure is not None) for e in plain.episodes],
        "recovery": [float(bool(e.recovered)) for e in forced.episodes if e.forced_at is not None],
    }
