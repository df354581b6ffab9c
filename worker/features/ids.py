"""A candidate's own id (SPEC §6): its names, its word pieces, its numbers and where they stand
among the row's candidates.

- **Names of a candidate**: its id, the segments of its id (`route:TRM_ONLY` -> `route`,
  `trm_only`; `BUY.GLOW` -> `buy`, `glow`) and its word pieces of three letters or more
  (`slot_oven_3` -> `slot`, `oven`), lower case. The state's parts keyed by one of them are the
  candidate's own (`aligned.py`).
- **Numbers of an id** are the ones outside the names the state uses: the 0 of `cpu0` in
  `place:cpu0@t3` is the machine's name (a key of the state), so a slot's time is its first
  number in every world.
- `pos`, `P:`, `N:`, and the ranks `NR:`/`NLO:` (among all candidates) and `GR:`/`GLO:` (among
  the candidates whose ids differ only in that number): ranks and distances, never the number of
  candidates, so a row offering twice the candidates seen in training reads the same.
"""

from __future__ import annotations

import re
from typing import Any

from worker.features.kinds import Features, name

_SEGMENTS = re.compile(r"[:@/.\s]+")
_WORDS = re.compile(r"[A-Za-z]{3,}")
_INTS = re.compile(r"\d+")
_DIGITS_AS_LETTERS = str.maketrans("0123456789", "abcdefghij")


def names_of(tool: str) -> set[str]:
    low = tool.lower()
    segments = [s for s in _SEGMENTS.split(low) if s]
    return {low, *segments, *(w.lower() for w in _WORDS.findall(tool))}


def pieces_of(tool: str) -> list[str]:
    return sorted({w.lower() for w in _WORDS.findall(tool)})


def id_numbers(tool: str) -> list[int]:
    return [int(n) for n in _INTS.findall(tool)][:4]


def id_features(tool: str, place: int, candidates: int, numbered: str) -> Features:
    """`pos`, `P:` and `N:` of one candidate (`numbered`: its id as `numbers_outside_names`
    gives it)."""
    # No count of candidates: anchors may offer twice as many as training did.
    f: Features = {name("pos"): place / max(1, candidates - 1)}
    for piece in pieces_of(tool):
        f[name("P", piece)] = 1.0
    for k, number in enumerate(id_numbers(numbered)):
        f[name("N", k)] = float(number)
    return f


def state_names(state: Any) -> set[str]:
    """Every key of the state's objects and every `name`/`id` of its list items, lower case."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                found.add(str(key).lower())
                walk(value)
        elif isinstance(node, list):
            for value in node[:64]:
                tag = value.get("name", value.get("id")) if isinstance(value, dict) else None
                if isinstance(tag, str):
                    found.add(tag.lower())
                walk(value)

    walk(state)
    return found


def numbers_outside_names(tool: str, names: set[str]) -> str:
    """The candidate's id with the digits of the names the state uses spelled as letters: in
    `place:cpu0@t3` the 0 is part of the machine `cpu0` (a key of the state), not a number, so
    the slot's time is its first number in every world (`place:lineA@t3`, `place:m2@t3`)."""
    low = tool.lower()
    for spelled in sorted(names, key=len, reverse=True):
        if spelled != low and any(c.isdigit() for c in spelled):
            low = low.replace(spelled, spelled.translate(_DIGITS_AS_LETTERS))
    return low


def id_number_ranks(tools: list[str], out: list[Features]) -> None:
    """Where each number in a candidate's id stands among the row's candidates: overall
    (`NR:k` its rank, `NLO:k` its distance to the least) and among the candidates whose ids
    differ only in that number (`GR:k`, `GLO:k`: the earliest slot on the same machine). Ranks
    and distances, not counts, so a row offering twice the candidates reads the same."""
    numbers = [id_numbers(t) for t in tools]
    for k in range(max((len(ns) for ns in numbers), default=0)):
        groups: dict[str, list[float]] = {}
        keys: list[str | None] = []
        for tool, ns in zip(tools, numbers, strict=True):
            if len(ns) <= k:
                keys.append(None)
                continue
            spans = list(_INTS.finditer(tool))
            key = tool[: spans[k].start()] + "#" + tool[spans[k].end() :]
            keys.append(key)
            groups.setdefault(key, []).append(float(ns[k]))
        column = [float(ns[k]) for ns in numbers if len(ns) > k]
        for f, ns, slot in zip(out, numbers, keys, strict=True):
            if slot is None:
                continue
            value, group = float(ns[k]), groups[slot]
            f[name("NR", k)] = sum(v < value for v in column) / len(column)
            f[name("NLO", k)] = value - min(column)
            f[name("GR", k)] = sum(v < value for v in group) / len(group)
            f[name("GLO", k)] = value - min(group)
