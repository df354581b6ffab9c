"""Writers of log files in each source format, good rows and broken ones (used by the tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.schemas.corpus import CorpusSpec


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    """Rows as JSONL; a str row is written verbatim (for broken lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def trace(
    episode: int,
    turn: int,
    pick: int | str | None,
    candidates: list[str],
    *,
    state: dict[str, Any] | None = None,
    kind: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A trm_play_root trace row; `state` goes inside `event` as the envs writer does."""
    event: dict[str, Any] = {
        "encounter_id": f"e{episode}-{turn}",
        "next_encounter": f"e{episode}-{turn + 1}",
        "outcome": "ok",
        "metrics": {"desirability": round(0.1 * turn, 3)},
        "state": state if state is not None else {"pos": [episode, turn], "goal": [3, 3]},
    }
    if kind:
        event["kind"] = kind
    row: dict[str, Any] = {
        "episode": episode,
        "turn": turn,
        "event": event,
        "latent": {"latent_norm": 1.5},
        "reasoning_interpret_log": {
            "candidate_scores": [{"opt_id": c, "score": 0.5} for c in candidates]
        },
        **extra,
    }
    if pick is not None:
        row["label"] = pick if isinstance(pick, str) else f"PICK {pick}"
    return row


def play_root(
    root: Path, worlds: dict[str, int], *, episodes: int = 2, candidates: tuple[str, ...] = ()
) -> Path:
    """A clean play root: `worlds` maps world id -> turns per episode; picks rotate."""
    for world, turns in worlds.items():
        tools = list(candidates) or [f"{world}.north", f"{world}.south", f"{world}.east"]
        rows = [
            trace(ep, turn, (ep + turn) % len(tools), tools)
            for ep in range(episodes)
            for turn in range(turns)
        ]
        write_jsonl(root / "worlds" / world / "trm_traces.jsonl", rows)
    return root


def normalized(state: dict[str, Any], tools: list[str], action: str, **meta: Any) -> dict:
    return {"state": json.dumps(state), "tools": tools, "action": action, "meta": meta}


def router_row(prompt: str, route: str | None, **output: Any) -> dict[str, Any]:
    out = {"intent": output.pop("intent", "ask"), "prompt_family": output.pop("family", "qa")}
    if route is not None:
        out["route"] = route
    out.update(output)
    return {"input": {"prompt_text": prompt}, "output": out}


def spec_of(*sources: dict[str, Any], **fields: Any) -> CorpusSpec:
    return CorpusSpec.model_validate({"sources": list(sources), **fields})


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
