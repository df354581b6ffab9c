"""The files a play folder's writers leave (worker/envs/writers.py) and the `sources[]` entry that
reads its reasoning traces back, for the writers, the benches that resolve a play folder
(core/benches/resolve.py) and the benchmarks and tests that build a corpus from one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TRACE_FILE = "reasoning_traces.jsonl"
TRACE_STATE_FIELDS = ("task.family", "task.goal", "observation")  # a trace row's whole state
TRACE_META_FIELDS = (
    "meta.world_id",
    "meta.family",
    "meta.run",
    "meta.episode",
    "meta.turn",
    "meta.kind",
)


def reasoning_trace_source(
    name: str, path: str, state_fields: Sequence[str] = TRACE_STATE_FIELDS, *, tags: bool = False
) -> dict[str, Any]:
    """A corpus spec's `jsonl` source in `reasoning_trace` mode over a trace file at `path`: the
    state from `state_fields`, the candidates from `options.ids` (and their shared tags from
    `options.tags` with `tags`), the action from `decision.action`, the row's world and turn
    kept as metadata."""
    source: dict[str, Any] = {
        "type": "jsonl",
        "mode": "reasoning_trace",
        "name": name,
        "path": path,
        "state_fields": list(state_fields),
        "tools_field": "options.ids",
        "action_field": "decision.action",
        "meta_fields": list(TRACE_META_FIELDS),
    }
    if tags:
        source["tags_field"] = "options.tags"
    return source
