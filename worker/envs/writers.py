"""The three play-log formats (SPEC §4), one writer each, fed one world's turns at a time.

Every format labels each row with how its pick was made (`kind`: oracle | suboptimal | invalid |
recovery) and what it led to (`outcome`: ok | success | invalid | dead_end).

trm_play_root: `<out>/worlds/<world_id>/trm_traces.jsonl` (+ `world.json`, the world's rules),
one row per decision:
    {"episode": 3, "turn": 1, "label": "PICK 0",
     "event": {"encounter_id": "grid-s0-w1/e3/t1", "next_encounter": "grid-s0-w1/e3/t2",
               "outcome": "ok", "metrics": {"desirability": 0.1667},
               "state": {...the observation...}, "kind": "oracle", "oracle_pick": 0,
               "action_tags": {"go_north": "move:north", ...}, "invalid_reason": "wall"?},
     "latent": {"latent_norm": 1.2019},
     "reasoning_interpret_log": {"candidate_scores": [
         {"opt_id": "go_north", "score": 1.0, "invalid": false, "dead_end": false}, ...]},
     "world_id": "grid-s0-w1", "family": "grid", "run": "grid-s0-w1:r0"}
  `PICK n` is 0-based over candidate_scores. `desirability` is the state's value before the
  decision, 1 / (1 + oracle cost to go); `latent_norm` stands in for a model latent: the L2 norm
  of the candidate scores. `invalid_reason` is present only on rows that picked an invalid
  candidate. `run` groups ten episodes of a world.

router_jsonl (route family only): `<out>/router.jsonl`, one row per routing decision:
    {"input": {"prompt_text": "...", "complexity": 3, "tokens": 120, "tools_needed": ["calc"],
               "private": false, "latency_budget_ms": 1000, "budget_left": 12, "reserve": 5,
               "queued": 2,
               "routes": {"TRM_ONLY": {"cost", "cap", "ms", "tools", "external"}, ...}},
     "output": {"route", "intent", "adapter_id", "expert_id", "prompt_family", "tool_caps",
                "rationale"},
     "meta": {"world_id", "episode", "turn", "run", "kind", "outcome"}}
  The output is the route actually taken, so rows of kind invalid/suboptimal hold wrong routes
  (negatives); their rationale says why.

reasoning_trace: `<out>/reasoning_traces.jsonl`, one row per decision:
    {"trace_id": "grid-s0-w1/e3/t1",
     "task": {"family": "grid", "world_id": "grid-s0-w1", "goal": "walk to a goal ..."},
     "observation": {...the observation...},
     "options": {"ids": ["go_north", ...], "tags": ["move:north", ...]},
     "reasoning": {"steps": ["go_north: cost 5", "go_east: refused (wall)", ...],
                   "conclusion": "take go_north"},
     "decision": {"action": "go_north", "outcome": "ok"},
     "meta": {"world_id", "family", "episode", "turn", "run", "kind"}}
  A corpus spec reads it with this `sources[]` entry (see REASONING_TRACE_SOURCE):
    {"type": "jsonl", "mode": "reasoning_trace", "name": "traces",
     "path": "<out>/reasoning_traces.jsonl",
     "state_fields": ["task.family", "task.goal", "observation"],
     "tools_field": "options.ids", "action_field": "decision.action",
     "meta_fields": ["meta.world_id", "meta.family", "meta.run", "meta.episode", "meta.turn",
                     "meta.kind"]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from core.play_files import TRACE_FILE, reasoning_trace_source
from worker.envs.base import World
from worker.envs.families import SUMMARIES
from worker.envs.play import Turn
from worker.envs.route import RouteWorld

FORMATS = ("trm_play_root", "router_jsonl", "reasoning_trace")
ROUTER_FILE = "router.jsonl"
PLAY_FILE = "trm_traces.jsonl"
EPISODES_PER_RUN = 10
REASONING_TRACE_SOURCE = reasoning_trace_source("traces", TRACE_FILE)


def dumps(obj: Any) -> str:
    """The one JSON spelling of every file here (stable, so same seed means same bytes)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def encounter_id(world: World, episode: int, turn: int) -> str:
    return f"{world.world_id}/e{episode}/t{turn}"


def run_name(world: World, episode: int) -> str:
    return f"{world.world_id}:r{episode // EPISODES_PER_RUN}"


# ---- rows ------------------------------------------------------------------------------------
def trace_row(world: World, turn: Turn) -> dict[str, Any]:
    items = turn.assessments
    picked = items[turn.pick]
    rest = world.cost_to_go(turn.state)
    event: dict[str, Any] = {
        "encounter_id": encounter_id(world, turn.episode, turn.turn),
        "next_encounter": None if turn.last else encounter_id(world, turn.episode, turn.turn + 1),
        "outcome": turn.outcome,
        "metrics": {"desirability": round(1.0 / (1.0 + (rest or 0.0)), 4)},
        "state": world.observe(turn.state),
        "kind": turn.kind,
        "oracle_pick": turn.oracle_pick,
        "action_tags": {a.action: a.tag for a in items},
    }
    if picked.invalid_reason:
        event["invalid_reason"] = picked.invalid_reason
    return {
        "episode": turn.episode,
        "turn": turn.turn,
        "label": f"PICK {turn.pick}",
        "event": event,
        "latent": {"latent_norm": round(math.sqrt(sum(a.score**2 for a in items)), 4)},
        "reasoning_interpret_log": {
            "candidate_scores": [
                {"opt_id": a.action, "score": a.score, "invalid": a.invalid, "dead_end": a.dead_end}
                for a in items
            ]
        },
        "world_id": world.world_id,
        "family": world.family,
        "run": run_name(world, turn.episode),
    }


def router_features(view: dict[str, Any]) -> dict[str, Any]:
    """The `input` of a router row from a route world's observation (also what a router policy
    sees when it is rolled out in that world)."""
    request = view["request"]
    return {
        "prompt_text": request["prompt_text"],
        "complexity": request["complexity"],
        "tokens": request["tokens"],
        "tools_needed": request["tools"],
        "private": request["private"],
        "latency_budget_ms": request["latency_budget_ms"],
        "budget_left": view["budget_left"],
        "reserve": view["reserve"],
        "queued": view["queued"],
        "routes": view["routes"],
    }


def router_row(world: RouteWorld, turn: Turn) -> dict[str, Any]:
    view = world.observe(turn.state)
    features = router_features(view)
    return {
        "input": features,
        "output": world.router_answer(turn.state, turn.action),
        "meta": {
            "world_id": world.world_id,
            "episode": turn.episode,
            "turn": turn.turn,
            "run": run_name(world, turn.episode),
            "kind": turn.kind,
            "outcome": turn.outcome,
        },
    }


def reasoning_row(world: World, turn: Turn) -> dict[str, Any]:
    steps = []
    for a in turn.assessments:
        if a.invalid:
            steps.append(f"{a.action}: refused ({a.invalid_reason})")
        elif a.dead_end:
            steps.append(f"{a.action}: dead end")
        else:
            steps.append(f"{a.action}: cost {a.q:g}")
    why = "" if turn.kind in ("oracle", "recovery") else f" (a deliberate {turn.kind} step)"
    return {
        "trace_id": encounter_id(world, turn.episode, turn.turn),
        "task": {
            "family": world.family,
            "world_id": world.world_id,
            "goal": SUMMARIES[world.family],
        },
        "observation": world.observe(turn.state),
        "options": {
            "ids": [a.action for a in turn.assessments],
            "tags": [a.tag for a in turn.assessments],
        },
        "reasoning": {"steps": steps, "conclusion": f"take {turn.action}{why}"},
        "decision": {"action": turn.action, "outcome": turn.outcome},
        "meta": {
            "world_id": world.world_id,
            "family": world.family,
            "episode": turn.episode,
            "turn": turn.turn,
            "run": run_name(world, turn.episode),
            "kind": turn.kind,
        },
    }


# ---- files -----------------------------------------------------------------------------------
class PlayLogWriter:
    """Writes the requested formats under `out`; `add` takes one world's turns."""

    def __init__(self, out: Path, formats: list[str]):
        unknown = [f for f in formats if f not in FORMATS]
        if unknown:
            raise ValueError(f"unknown format {unknown[0]!r}; known: {', '.join(FORMATS)}")
        self.out, self.formats = out, formats
        self.rows: dict[str, int] = {}  # file (relative to out) -> rows written
        self._shared: dict[str, IO[str]] = {}
        out.mkdir(parents=True, exist_ok=True)
        if "router_jsonl" in formats:
            self._open(ROUTER_FILE)
        if "reasoning_trace" in formats:
            self._open(TRACE_FILE)

    def _open(self, name: str) -> None:
        self._shared[name] = (self.out / name).open("w", encoding="utf-8", newline="\n")
        self.rows[name] = 0

    def add(self, world: World, turns: list[Turn]) -> None:
        if "trm_play_root" in self.formats:
            folder = self.out / "worlds" / world.world_id
            folder.mkdir(parents=True, exist_ok=True)
            about = {
                "world_id": world.world_id,
                "family": world.family,
                "action_tags": world.action_tags,
                "params": world.params,
            }
            (folder / "world.json").write_text(dumps(about) + "\n", encoding="utf-8")
            name = f"worlds/{world.world_id}/{PLAY_FILE}"
            with (self.out / name).open("w", encoding="utf-8", newline="\n") as fh:
                for turn in turns:
                    fh.write(dumps(trace_row(world, turn)) + "\n")
            self.rows[name] = len(turns)
        if "router_jsonl" in self.formats and isinstance(world, RouteWorld):
            for turn in turns:
                self._shared[ROUTER_FILE].write(dumps(router_row(world, turn)) + "\n")
            self.rows[ROUTER_FILE] += len(turns)
        if "reasoning_trace" in self.formats:
            for turn in turns:
                self._shared[TRACE_FILE].write(dumps(reasoning_row(world, turn)) + "\n")
            self.rows[TRACE_FILE] += len(turns)

    def close(self) -> None:
        for handle in self._shared.values():
            handle.close()
        self._shared.clear()
