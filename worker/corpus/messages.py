"""Chat rows for the `qlora` trainer, and the one prompt format (the evaluator renders the same).

Contracts (SPEC §4): `action_only`, the assistant says the action id alone; `json`, the assistant
says the router's JSON object (its `route` is the action; rows from other sources say
`{"action": id}`). Loss on assistant tokens only is the trainer's job.
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM_PROMPTS = {
    "action_only": (
        "You are a controller. Read the state and the candidate actions, then answer with the id "
        "of the one action to take and nothing else."
    ),
    "json": (
        "You are a controller. Read the state and the candidate actions, then answer with one "
        'JSON object whose "route" (or "action") is one of the candidates.'
    ),
}
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def user_prompt(state: str, tools: list[str]) -> str:
    return "State: " + state + "\nCandidates:\n" + "\n".join("- " + tool for tool in tools)


def assistant_answer(contract: str, action: str, answer: dict[str, Any] | None) -> str:
    if contract == "action_only":
        return action
    if answer is not None:
        return _dumps({**answer, "route": action})
    return _dumps({"action": action})


def chat_row(
    contract: str,
    state: str,
    tools: list[str],
    action: str,
    answer: dict[str, Any] | None,
    meta: dict[str, Any],
) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPTS[contract]},
            {"role": "user", "content": user_prompt(state, tools)},
            {"role": "assistant", "content": assistant_answer(contract, action, answer)},
        ],
        "meta": meta,
    }
