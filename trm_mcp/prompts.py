"""The MCP prompts: the usual tasks as step lists an agent (or its user, from Hermes's prompt
list) starts from, each with a ready spec, so the tools' own definitions can stay short."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ROUTERBENCH_CORPUS = {
    "sources": [{"type": "trm_play_root", "name": "routerbench", "path": "benches/routerbench"}],
    "split": {"by": "env", "seed": 0, "anchor": ["route-s1000-w8", "route-s1000-w9"]},
    "contract": "action_only",
}
TRAIN_SPEC = {
    "kind": "train",
    "name": "routerBench trm router",
    "trainer": "trm",
    "corpus": ROUTERBENCH_CORPUS,
}
HILLCLIMB_SPEC = {
    "kind": "hillclimb",
    "name": "routerBench hill-climb",
    "base": {"trainer": "trm", "corpus": ROUTERBENCH_CORPUS, "trm": {"epochs": 4, "hidden": 32}},
    "knobs": {"recovery_rate": [None, 0.2], "negative_rate": [None, 0.25]},
    "max_candidates": 6,
}
REPORT = (
    "Report only what scorecard.json says (anchor_score with its n and interval, the "
    "generalization gap); a run is done only when its status and every stage are completed."
)
FOLLOW = "wait_for_run(run_id) until finished is true (call it again while it is not)"


@dataclass(frozen=True)
class Prompt:
    name: str
    description: str
    arguments: tuple[tuple[str, str, bool], ...]  # (name, description, required)
    render: Callable[[dict[str, str]], str]


def _spec(spec: Mapping[str, object]) -> str:
    return json.dumps(spec, separators=(",", ":"))


def train_router(args: dict[str, str]) -> str:
    return (
        "Train a router on routerBench and bench it:\n"
        f'1. submit_run(spec={_spec(TRAIN_SPEC)}) (add "dry_run":true first to see the plan)\n'
        f"2. {FOLLOW}\n"
        '3. start_bench(name="routerbench", router=<that run id>, baseline="none")\n'
        f'4. {FOLLOW}, then read_artifact(run_id, "scorecard.json")\n' + REPORT
    )


def hill_climb(args: dict[str, str]) -> str:
    return (
        "Hill-climb a routerBench router's data knobs along the generalization ladder:\n"
        f"1. submit_run(spec={_spec(HILLCLIMB_SPEC)}) (the full schema: resource "
        "trm://schemas/hillclimb)\n"
        f"2. {FOLLOW}\n"
        "3. get_ledger(run_id): every candidate, its knobs, score and decision\n"
        '4. bench the best: start_bench(name="routerbench", router="<run id>:final", '
        'baseline="<run id>:root"), then read its scorecard.json\n' + REPORT
    )


def bench_run(args: dict[str, str]) -> str:
    run_id = args.get("run_id") or "<train run id>"
    bench = args.get("bench") or "routerbench"
    return (
        f"Bench run {run_id} on {bench}:\n"
        f'1. start_bench(name="{bench}", router="{run_id}", baseline="none") '
        "(dry_run=true first shows the resolved config)\n"
        f"2. {FOLLOW}\n"
        '3. read_artifact(run_id of the bench, "scorecard.json")\n' + REPORT
    )


def decide_with(args: dict[str, str]) -> str:
    name = args.get("name") or "<controller>"
    return (
        f"Decide with the promoted controller {name}:\n"
        f'1. list_controllers(name="{name}"): its live version and scorecard figures\n'
        f'2. decide(name="{name}", rows=[{{"state": "<the state as text>", '
        '"tools": ["<candidate>", ...]}]): per row the action, each candidate\'s '
        "probability and the margin\n"
        "3. a row that abstains (margin under the controller's threshold) is the controller "
        "saying it is unsure: decide that one yourself and say so\n"
        "4. a decision with a decision_id is logged: once you know how it went, "
        f'report_outcomes(name="{name}", outcomes=[{{"decision_id": "<id>", "success": true}}]) '
        "(the outcomes become training rows)"
    )


PROMPTS = {
    p.name: p
    for p in (
        Prompt("train-router", "Train a router on routerBench, then bench it", (), train_router),
        Prompt(
            "hill-climb",
            "Hill-climb a routerBench router's data knobs, then bench the best",
            (),
            hill_climb,
        ),
        Prompt(
            "bench-run",
            "Bench a trained run on a bench (routerBench by default)",
            (
                ("run_id", "the train run (or <hill-climb id>:final)", True),
                ("bench", "a bench from list_benches (default routerbench)", False),
            ),
            bench_run,
        ),
        Prompt(
            "decide",
            "Decide with a promoted controller",
            (("name", "the controller's name (list_controllers)", True),),
            decide_with,
        ),
    )
}
