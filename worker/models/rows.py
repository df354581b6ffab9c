"""Corpus rows as every model reads them: state (JSON text), tools, action, and the env (world)
the row comes from (empty when the corpus does not say)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker.context import StageFailure


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A corpus split (`train.jsonl`, ...) as rows of state, tools, action; a missing file has
    none; a line that is not such a row is `bad_input`, named by file and line."""
    if not path.exists():
        return []
    rows = []
    # Rows end at "\n" only: str.splitlines would also cut inside a JSON string holding a
    # character such as U+0085 (exported as is), as one of RouteLLM's MMLU prompts does.
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            state, tools, action = row["state"], row["tools"], row["action"]
        except (ValueError, KeyError, TypeError):
            raise StageFailure(
                "bad_input",
                f"{path.name} line {n}: not a corpus row with state, tools, action; "
                "rebuild the corpus (prepare_corpus) or fix the file",
            ) from None
        if not isinstance(tools, list) or not tools or action not in tools:
            raise StageFailure(
                "bad_input", f"{path.name} line {n}: the action is not one of the row's tools"
            )
        meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
        rows.append(
            {
                "state": state if isinstance(state, str) else json.dumps(state),
                "tools": [str(t) for t in tools],
                "action": action,
                "env": str(meta.get("env") or ""),
            }
        )
    return rows
