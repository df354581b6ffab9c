"""A small local JSONL export of a verifiers environment's results, in the form the primehub benches
read (`results_jsonl`: normalized rows `{state, tools, action, meta}`), with the scores an
untrained controller must get on it, worked out by hand.

Train worlds offer one candidate per row (any policy is right: train_score 1.0). Anchor worlds
offer candidates no train row mentions, so an untrained controller cannot tell them apart and
takes the first one offered (ties go to the earlier candidate): a row is right exactly when its
action is listed first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# (tools, action, kind) per anchor row.
GRID_ANCHOR = [
    (["climb", "dig", "swim"], "climb", None),  # right
    (["dig", "climb", "swim"], "climb", None),  # wrong
    (["swim", "dig"], "swim", None),  # right
    (["dig", "swim"], "swim", "recovery"),  # wrong (a recovery row)
    (["climb", "swim"], "climb", "recovery"),  # right (a recovery row)
    (["dig", "climb"], "dig", "invalid"),  # a known bad pick, listed first: repeated
    (["climb", "dig"], "dig", "invalid"),  # a known bad pick, listed second: avoided
    (["climb", "dig"], "fly", None),  # action not among the tools: an invalid row, not scored
]
VERIFY_ANCHOR = [
    (["accept", "reject"], "accept", None),  # right
    (["reject", "accept"], "accept", None),  # wrong
    (["accept", "reject"], "reject", None),  # wrong
]
EXPECTED = {
    "anchor_score": 0.5,  # grid 3 of 5, verify 1 of 3
    "per_world": {"grid": 0.6, "verify": 0.3333},
    "n_anchor": 8,
    "train_score": 1.0,
    "generalization_gap": 0.5,
    "recovery_rate": 0.5,  # 1 of 2 recovery rows right
    "failure_rate": 0.5,  # 1 of 2 known bad picks repeated
    "invalid_rows": 1,
}


def write_export(path: Path, anchor_worlds: list[str]) -> Path:
    """The export for a bench whose anchor worlds are `anchor_worlds` (its grid and verify ones)."""
    grid = next(w for w in anchor_worlds if w.startswith("grid-"))
    verify = next(w for w in anchor_worlds if w.startswith("verify-"))
    seed = grid.split("-")[1]  # "s2000"
    rows: list[dict[str, Any]] = []
    for family, moves in (("grid", ["north", "east"]), ("verify", ["check", "pass"])):
        for w in (0, 1, 2):
            for step in range(3):
                world = f"{family}-{seed}-w{w}"
                tool = moves[step % 2]
                rows.append(_row(world, family, step, [tool], tool, None))
    for world, family, table in ((grid, "grid", GRID_ANCHOR), (verify, "verify", VERIFY_ANCHOR)):
        for step, (tools, action, kind) in enumerate(table):
            rows.append(_row(world, family, step, tools, action, kind))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(
    world: str, family: str, step: int, tools: list[str], action: str, kind: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"world_id": world, "family": family, "episode": 0, "turn": step}
    if kind:
        meta["kind"] = kind
    state = {"task": family, "world": world, "turn": step, "budget": 10 - step}
    return {"state": state, "tools": tools, "action": action, "meta": meta}
