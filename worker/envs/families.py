"""The family menu: names, one class per family, and how a world id maps to a seeded world."""

from __future__ import annotations

from worker.envs.base import World, seeded_rng
from worker.envs.grid import GridWorld
from worker.envs.rebalance import RebalanceWorld
from worker.envs.route import RouteWorld
from worker.envs.schedule import ScheduleWorld
from worker.envs.verify import VerifyWorld

FAMILIES: dict[str, type[World]] = {
    "route": RouteWorld,
    "grid": GridWorld,
    "rebalance": RebalanceWorld,
    "schedule": ScheduleWorld,
    "verify": VerifyWorld,
}
SUMMARIES = {
    "route": "route each request of a session to TRM_ONLY / TRM_PLUS_LLM / LLM_DIRECT / "
    "COMPILE_PROMPT under cost, quality, latency, tool and privacy rules",
    "grid": "walk to a goal past walls, locked doors (fetch the key) and pits, on a step budget",
    "rebalance": "trade a portfolio onto target lots, one lot a day, under fees, cash and caps",
    "schedule": "place queued jobs on machine slots under release, deadline, precedence, "
    "eligibility and maintenance constraints",
    "verify": "accept or reject proposed solutions of another family's episodes (replayed to "
    "decide), with a few escalations",
}


def world_id(family: str, seed: int, index: int) -> str:
    """`grid-s7-w3`: the family, the generation seed and the world's index. The corpus builder
    reads the family off the id's prefix."""
    return f"{family}-s{seed}-w{index}"


def make_world(family: str, seed: int, index: int) -> World:
    """The world `world_id(family, seed, index)`: the same arguments always give the same world,
    whatever other families or worlds are generated alongside it."""
    if family not in FAMILIES:
        raise KeyError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    wid = world_id(family, seed, index)
    return FAMILIES[family].generate(wid, seeded_rng("world", wid))


def make_worlds(families: list[str], worlds: int, seed: int) -> list[World]:
    return [make_world(family, seed, index) for family in families for index in range(worlds)]
