"""One normalized row, the labels that route it, and the per-source accounting of every line read.

Labels (what makes a row a negative or a recovery), looked up in this order, first hit wins:
`row.kind`, `row.label_kind`, `event.kind`, `event.label_kind`, `meta.kind`, `meta.label_kind`.
- negative kinds: `negative`, `invalid`, `suboptimal`, `dead_end`, `wrong`; also a row whose
  `event.outcome` is one of those, or one with `negative: true` (row, event or meta). Negatives go
  to critic.jsonl, never to the action corpus.
- recovery: kind `recovery`, or `recovery: true` (row, event or meta). A recovery row is a positive
  (the right action after a forced bad step); `knobs.recovery_rate` sets its share of train.
- anything else (`oracle`, `positive`, none) is a positive. The kind, when given, is kept in meta.

Family (the unit of the `min_exact_positives` floor): an explicit `family` (row, event or meta),
else the router's `prompt_family`, else its `intent`, else the env's prefix: the env/world id up
to its first `-`, `_`, `:`, `/` or `.` (`grid-w3` -> `grid`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

NEGATIVE_KINDS = frozenset({"negative", "invalid", "suboptimal", "dead_end", "wrong"})
RECOVERY_KIND = "recovery"
_KIND_KEYS = ("kind", "label_kind")
_FAMILY_PREFIX = re.compile(r"[-_:/.]")
# Line numbers kept per invalid reason and file, to point at bad rows without bloating manifests.
EXAMPLE_LINES = 5


@dataclass(slots=True)
class Row:
    """A validated row: `state` is compact JSON text (the dedupe and export form)."""

    state: str
    state_obj: Any
    tools: list[str]
    action: str
    meta: dict[str, Any]
    source: str
    env: str
    run: str
    episode: str
    family: str
    negative: bool
    recovery: bool
    digest: str = ""
    # The router's JSON object for the `json` contract (None for other sources).
    answer: dict[str, Any] | None = None
    # The world's own shared tag per action id (`use-trm` -> `route:TRM_ONLY`), when it says.
    tags: dict[str, str] = field(default_factory=dict)


compact_json = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode


def state_text(state: Any) -> tuple[str, Any]:
    """(compact JSON text, object) of a state; raises Invalid for an empty one (None too)."""
    if isinstance(state, str):
        text = state.strip()
        if text[:1] in ("{", "["):
            # JSON text is made compact and key-sorted, so equal states dedupe as equal.
            try:
                state = json.loads(text)
            except ValueError:
                return text, None
        elif not text or text == "null":
            raise Invalid("missing_state")
        else:
            return text, None
    if state is None or state == {} or state == []:
        raise Invalid("missing_state")
    return compact_json(state), state


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_kind(row: dict[str, Any], event: dict[str, Any], meta: dict[str, Any]) -> str | None:
    for holder in (row, event, meta):
        for key in _KIND_KEYS:
            value = holder.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def classify(
    row: dict[str, Any], event: dict[str, Any], meta: dict[str, Any]
) -> tuple[str | None, bool, bool]:
    """(kind, negative, recovery) for a raw row; see the module docstring for the markers."""
    kind = read_kind(row, event, meta)
    holders = (row, event, meta)
    outcome = event.get("outcome")
    negative = (
        kind in NEGATIVE_KINDS
        or (isinstance(outcome, str) and outcome in NEGATIVE_KINDS)
        or any(holder.get("negative") is True for holder in holders)
    )
    recovery = kind == RECOVERY_KIND or any(holder.get("recovery") is True for holder in holders)
    return kind, negative, recovery and not negative


def env_family(env: str) -> str:
    return _FAMILY_PREFIX.split(env, maxsplit=1)[0] or env


def family_of(*holders: dict[str, Any], env: str) -> str:
    for key in ("family", "prompt_family", "intent"):
        for holder in holders:
            value = holder.get(key)
            if isinstance(value, str) and value:
                return value
    return env_family(env)


@dataclass
class Tally:
    """What happened to every line of one source: kept, invalid (per reason), or duplicate."""

    name: str
    type: str
    path: str
    files: list[str] = field(default_factory=list)
    rows_read: int = 0
    rows_kept: int = 0
    duplicates: int = 0
    blank_lines: int = 0
    invalid: dict[str, int] = field(default_factory=dict)
    # reason -> file -> first few line numbers
    examples: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    # Files of a folder source that link out of it: skipped, named (core/paths.files_inside).
    links_outside: list[str] = field(default_factory=list)

    def reject(self, reason: str, file: str, line: int) -> None:
        self.invalid[reason] = self.invalid.get(reason, 0) + 1
        lines = self.examples.setdefault(reason, {}).setdefault(file, [])
        if len(lines) < EXAMPLE_LINES:
            lines.append(line)

    @property
    def rows_invalid(self) -> int:
        return sum(self.invalid.values())

    def to_manifest(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "path": self.path,
            "files": self.files,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "rows_invalid": self.rows_invalid,
            "duplicates": self.duplicates,
            "blank_lines": self.blank_lines,
            "invalid": {
                reason: {
                    "count": self.invalid[reason],
                    "first_lines": [
                        {"file": file, "lines": lines}
                        for file, lines in sorted(self.examples[reason].items())
                    ],
                }
                for reason in sorted(self.invalid)
            },
            "kinds": dict(sorted(self.kinds.items())),
            **({"links_outside": self.links_outside} if self.links_outside else {}),
        }


class Invalid(Exception):
    """Raised inside a source reader: the current line is invalid for `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
