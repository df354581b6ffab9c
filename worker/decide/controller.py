"""A trained controller answering rows (`DecideRow`: a state and its candidate tools) with a
`Decision` each: the action, each candidate's probability, the margin and whether it abstains
(`decision.py` says how those are made).

It stands on the policies of evaluation (`worker/evaluate/policies.py`): the same files load the
same model, so a decision here is the argmax a bench scored. One `decide(rows)` is one scoring
call for the whole batch (the trm splits it into forwards of `SCORE_ROWS` rows). A row the
controller cannot read raises `RowError` naming the field (`rows[3].tools`) before any model
runs; the bounds are the constants below.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.rundir import ADAPTER, RUN_META
from worker.decide.decision import Decision, check_margin, decision
from worker.evaluate.policies import load_policy
from worker.models.policy import Policy

__all__ = ["Controller", "DecideRow", "Decision", "RowError", "load_controller"]

TRAINERS = ("trm", "gbdt", "qlora")
MAX_ROWS = 4096  # rows per decide call
MAX_STATE_CHARS = 256 * 1024  # a state's JSON text
MAX_TOOLS = 256  # candidates per row
MAX_TOOL_CHARS = 256  # one candidate's id


@dataclass(frozen=True)
class DecideRow:
    """A corpus row's shape without its action: the state as text (a caller given a JSON object
    serializes it) and the candidate tools, in order."""

    state: str
    tools: list[str]


class RowError(ValueError):
    """A row the controller cannot read; `field` names it (`rows[3].tools`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class Controller:
    """A loaded model behind `decide`. `trainer` is "trm", "gbdt" or "qlora"; `model_hash` the
    hash of its files (the policy's: the same weights give the same hash)."""

    def __init__(self, policy: Policy, trainer: str, abstain_margin: float | None = None) -> None:
        self.policy = policy
        self.trainer = trainer
        self.model_hash = policy.model_hash
        self.abstain_margin = check_margin(abstain_margin)

    def decide(self, rows: Sequence[DecideRow]) -> list[Decision]:
        check_rows(rows)
        if not rows:
            return []
        scores = self.policy.scores_batch([r.state for r in rows], [list(r.tools) for r in rows])
        return [
            decision(row.tools, s, self.abstain_margin) for row, s in zip(rows, scores, strict=True)
        ]


def load_controller(
    trainer_dir: Path, trainer: str, abstain_margin: float | None = None
) -> Controller:
    """The model a train run left in `trainer_dir` (`<run>/trainer/`) as a controller, on the CPU
    for a trm. Missing or outdated files are the loaders' `dependency` StageFailure naming them;
    an unknown trainer is a ValueError."""
    trainer_dir = Path(trainer_dir)
    ref: dict[str, Any]
    if trainer in ("trm", "gbdt"):
        ref = {"type": trainer, "path": str(trainer_dir)}
    elif trainer == "qlora":
        meta = trainer_dir / RUN_META
        contract = json.loads(meta.read_text()).get("contract") if meta.is_file() else None
        ref = {"type": "qlora", "path": str(trainer_dir / ADAPTER),
               "contract": contract or "action_only"}  # fmt: skip
    else:
        raise ValueError(f"trainer: {trainer!r} is not one of {', '.join(TRAINERS)}")
    return Controller(load_policy(ref), trainer, abstain_margin)


def check_rows(rows: Sequence[DecideRow]) -> None:
    """`RowError` for the first row the controller cannot read."""
    if len(rows) > MAX_ROWS:
        raise RowError("rows", f"{len(rows)} rows, at most {MAX_ROWS} per call")
    for i, row in enumerate(rows):
        where = f"rows[{i}]"
        if not isinstance(row.state, str):
            raise RowError(f"{where}.state", "not a string (serialize a JSON object first)")
        if len(row.state) > MAX_STATE_CHARS:
            raise RowError(
                f"{where}.state", f"{len(row.state)} characters, at most {MAX_STATE_CHARS}"
            )
        tools = row.tools
        if not isinstance(tools, list | tuple) or not tools:
            raise RowError(f"{where}.tools", "no candidate tools (at least one is needed)")
        if len(tools) > MAX_TOOLS:
            raise RowError(f"{where}.tools", f"{len(tools)} candidates, at most {MAX_TOOLS}")
        seen: set[str] = set()
        for k, tool in enumerate(tools):
            if not isinstance(tool, str) or not tool:
                raise RowError(f"{where}.tools[{k}]", "not a non-empty string")
            if len(tool) > MAX_TOOL_CHARS:
                raise RowError(
                    f"{where}.tools[{k}]", f"{len(tool)} characters, at most {MAX_TOOL_CHARS}"
                )
            if tool in seen:
                raise RowError(f"{where}.tools[{k}]", f"{tool!r} is offered twice")
            seen.add(tool)
