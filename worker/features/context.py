"""The state as leaves, and what is the same for every candidate of a row (SPEC §6).

- **Leaves**: every number (bools as 0/1) under its dotted path; lists of numbers leaf by index
  (`pos.0`, `pos.1`: their order is kept), lists of objects too; short strings; strings of
  several words as text too (`text.py`); lists of strings as a set, in order, as a grid when
  they are lines of cells (`cells.py`) and as text when some items are.
- **Context**: the leaves outside every candidate's aligned parts. `C:<c>` a context number (the
  first `MAX_CONTEXT`); `CS:<c>:<value>` a context string's value, or an item of a context list
  of strings, as a flag (a phase, a mode, the keys held: a category no number spells); `L:`,
  `DUP:`, `LD:` the shapes of its lists (length, repeats, length differences: what a set of
  items alone cannot show); `VD:` two short number lists item by item
  (`goal` less `pos`); `IDX:`/`IDXE:` where a name of the candidate stands in a list of strings;
  `X:` a context word or cell as one candidate sees it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from worker.features.cells import Grid, is_cells, is_grid
from worker.features.kinds import Features, name, start
from worker.features.text import SHORT, Text, is_text
from worker.features.values import Value, number_of

MAX_LIST_INDEX = 8  # numbers of a list beyond this index are left out (order kept up to it)
MAX_LISTS = 8  # lists whose shapes (length, repeats, length differences) a row reports
MAX_FLAGGED = 16  # items of a context list of strings flagged (`CS:`), the first in sorted order
MAX_CROSSED_CANDIDATES = 8  # context features are crossed with the candidate up to this many
_CROSSED = (start("W"), start("WIN"))  # the context features crossed (words: not their pairs)


def leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Value]]:
    """(dotted path, value) for every leaf (see the module's docstring)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, list):
        if obj and all(isinstance(v, str) for v in obj):
            yield path, frozenset(v.lower() for v in obj)
            yield path, tuple(v.lower() for v in obj)
            if is_grid(obj):
                yield path, Grid(tuple(obj))
            if words := [v for v in obj if is_text(v)]:
                yield path, Text("\n".join(words))
        else:
            for i, value in enumerate(obj[:MAX_LIST_INDEX]):
                yield from leaves(value, f"{path}.{i}")
    elif (number := number_of(obj)) is not None:
        yield path, number
    elif isinstance(obj, str):
        if len(obj) <= SHORT:
            yield path, obj.lower()
        if is_text(obj):
            yield path, Text(obj)


def nested(obj: Any) -> Any:
    """A state flattened to dotted keys (`state_compression: minimal` writes
    `{"routes.TRM_ONLY.cost": 1, "requests": [{...}], ...}`: objects opened down to their
    leaves, lists kept whole, whatever they hold) read as the nested object it came from. Other
    states are left as they are: where a value is an object, a dotted key is a name
    (`route.local`)."""
    if not isinstance(obj, dict) or not any("." in str(k) for k in obj):
        return obj
    if any(isinstance(v, dict) for v in obj.values()):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.items():
        parts = str(key).split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = value
    return out


def parse_state(state_text: str) -> Any:
    """A row's state as an object (text that is not JSON is `{"text": ...}`)."""
    try:
        return nested(json.loads(state_text))
    except (TypeError, ValueError):
        return {"text": state_text}


def inside(path: str, roots: set[str]) -> bool:
    """`path` is one of `roots` or under one (a root then a dot starts it). Each prefix of
    `path` that ends before a dot is looked up, rather than each root tried: this runs for every
    leaf of a state."""
    if path in roots:
        return True
    dot = path.find(".")
    while dot != -1:
        if path[:dot] in roots:
            return True
        dot = path.find(".", dot + 1)
    return False


def context_leaves(state: Any, aligned_roots: set[str]) -> list[tuple[str, Value]]:
    """Leaves of the state outside every candidate's aligned parts."""
    return [(p, v) for p, v in leaves(state) if not inside(p, aligned_roots)]


def string_flags(
    strings: Iterable[tuple[str, str]],
    sets: Iterable[tuple[str, frozenset[str]]],
    grids: Collection[str],
) -> Features:
    """`CS:<c>:<value>`: each context string that reads as a category (`category`) as a
    flag, and likewise those among the first MAX_FLAGGED items (in sorted order) of each context
    list of strings (a grid's lines are cells, read by `cells.py`). Without them a category the
    state spells in a word (`keys: "a"` once a key is held, `phase: "draining"`) is no feature
    at all: only the comparisons with a candidate's own strings read it."""
    f: Features = {}
    for path, value in strings:
        if category(value):
            f[name("CS", path, value)] = 1.0
    for path, items in sets:
        if path in grids:
            continue
        for item in sorted(items)[:MAX_FLAGGED]:
            if category(item):
                f[name("CS", path, item)] = 1.0
    return f


def category(value: str) -> bool:
    """A string read as a category: one word, not empty, and not a line of cells (a machine's
    time slots `".m.m..."`, read by position: `cells.py`)."""
    return bool(value) and not is_text(value) and not (is_cells(value) and not value.isalnum())


def list_places(lists: list[tuple[str, tuple[str, ...]]], names: set[str]) -> Features:
    """`IDX:`/`IDXE:` of one candidate: where its names first and last stand in each context
    list of strings (a queue's head, the last action taken)."""
    f: Features = {}
    for path, items in lists:
        places = [k for k, item in enumerate(items) if item in names]
        if places:
            f[name("IDX", path)] = float(places[0])
            f[name("IDXE", path)] = float(len(items) - 1 - places[-1])
    return f


def crossed(shared: Features, tool: str) -> Features:
    """`X:<name>@<id>`: the context's words and cells around its anchors as this candidate sees
    them. What a linear model per action learns (which words route to `strong`), a tree reaches
    in one split; without it, a split on a context feature alone ranks no candidate above
    another, and greedy trees never take it."""
    low = tool.lower()
    return {
        name("X", key, low): value
        for key, value in shared.items()
        if key.startswith(_CROSSED) and " " not in key
    }


def number_lists(context: list[tuple[str, Value]]) -> list[tuple[str, list[float]]]:
    """The context's lists of numbers (`pos.0`, `pos.1` -> `pos = [x, y]`), in order."""
    lists: dict[str, list[float]] = {}
    for path, value in context:
        parent, dot, index = path.rpartition(".")
        if dot and index.isdigit() and isinstance(value, float):
            numbers = lists.setdefault(parent, [])
            if int(index) == len(numbers):
                numbers.append(value)
    return list(lists.items())[:MAX_LISTS]


def list_differences(lists: list[tuple[str, list[float]]]) -> Features:
    """`VD:<a>|<b>:<i>`: two context lists of numbers of one short length, item by item
    (`goal` less `pos`: the way to go)."""
    out: Features = {}
    short = [(p, v) for p, v in lists if 2 <= len(v) <= 4]
    for k, (pa, va) in enumerate(short):
        for pb, vb in short[k + 1 :]:
            if len(va) == len(vb):
                for i, (a, b) in enumerate(zip(va, vb, strict=True)):
                    out[name("VD", pa, pb, i)] = a - b
    return out


def list_shapes(state: Any, roots: set[str]) -> Features:
    """The shape of the state's lists outside the candidates' own parts (the same for every
    candidate): `L:<list>` its length, `DUP:<list>` its repeated items, and `LD:<a>|<b>` the
    difference of two lists' lengths (a proposal one step short of the jobs it should place,
    a plan that names a slot twice): what set-valued leaves alone cannot show."""
    shapes: list[tuple[str, list[Any]]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}" if path else str(key)
                if not inside(here, roots):
                    walk(value, here)
        elif isinstance(node, list) and len(shapes) < MAX_LISTS:
            shapes.append((path, node))  # lists inside lists are items, not shapes

    walk(state, "")
    return shape_features(shapes)


def shape_features(shapes: list[tuple[str, list[Any]]]) -> Features:
    """The shape features of a state's lists (path, items), in the order they were met: each
    list's length and duplicated items, and every pair's difference of lengths."""
    context: Features = {}
    for path, items in shapes:
        context[name("L", path)] = float(len(items))
        keys = [json.dumps(v, sort_keys=True) for v in items]
        context[name("DUP", path)] = float(len(keys) - len(set(keys)))
    for a, (pa, la) in enumerate(shapes):
        for pb, lb in shapes[a + 1 :]:
            context[name("LD", pa, pb)] = float(len(la) - len(lb))
    return context
