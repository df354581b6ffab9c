"""What a controller sees of one row: each candidate set against the state, as named numbers
(SPEC §6, "the input encoding aligns each candidate with the parts of the state about it, keeps
list order and treats numbers as numbers"). Shared by the `gbdt` reference and the `trm`.

Generic: no family is named here. For a row `(state, tools)`:

- **Names of a candidate**: its id, the segments of its id (`route:TRM_ONLY` -> `route`,
  `trm_only`; `BUY.GLOW` -> `buy`, `glow`) and its word pieces of three letters or more
  (`slot_oven_3` -> `slot`, `oven`), lower case.
- **Aligned**: parts of the state keyed by one of the candidate's names (`routes.TRM_ONLY.*`,
  `assets.GLOW.*`, `busy.oven`), or list items whose `name`/`id` is one. Their leaves are the
  candidate's own fields, under a path with the matched key as `*`, so another world's spelling
  of the same field lines up (`A:routes.*.cost`).
- **Context**: every other leaf of the state; lists of numbers keep their order (`pos.0`,
  `pos.1`), lists of strings are sets.
- **Features** (`name -> float`, one dict per candidate):
  `pos` (its place in the list, 0..1); `P:<piece>` (the candidate's name pieces);
  `N:<i>` (the i-th integer in its id, `t3` -> 3) with `NR:`/`NLO:` (its rank among the
  candidates, its distance to their least) and `GR:`/`GLO:` (the same among the candidates
  whose ids differ only in that number); `A:<field>` (an aligned number; a field keyed by a
  context string is also under that string's path: with `request.intent = "code"`,
  `routes.*.cap.code` is also `routes.*.cap.[request.intent]`, the cap that applies) with
  `R:` (its rank among the candidates), `HI:`/`LO:` (its distance to their max/min);
  `C:<leaf>` (a context number, the same for every candidate); `D:<a>|<c>` (aligned or id
  number minus context number) and `GE:<a>|<c>` (whether it is at least the context number: a
  rule's edge, `t >= release`, as a flag, which a neural model does not stretch past the values
  it trained on); `IN:<a>|<c>` (context string in an aligned list),
  `COV:<a>|<c>` (share of a context list in an aligned list), `EQ:<a>|<c>` (equal strings);
  `NAME_IN:<c>` (a candidate name is in a context list or equals a context string);
  `L:<list>`, `DUP:<list>`, `LD:<a>|<b>` (a context list's length, its repeated items, two
  lists' length difference); `AT:<line>|<k>:<symbol>` and `RUN:<line>|<k>` (an aligned line of
  cells, `busy.oven = "..#.."`, read at the candidate's k-th id number: the symbol there, and
  `RUN:<line>|<k>:<symbol>` how many cells from there hold it).
- **Numbers of an id** are the ones outside the names the state uses: the 0 of `cpu0` in
  `place:cpu0@t3` is the machine's name (a key of the state), so a slot's time is its first
  number in every world.
- **Size-invariant**: ranks and distances, never the number of candidates, so a row at the
  anchors offering twice the candidates seen in training reads the same.

A plan in the state (a verifier's proposal) is read step by step by `plan.py`, with this
encoding of each step; `feature_space.row_features` joins the two. `FeatureSpace` chooses which
of these names a model reads and scales them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from worker.features import text as texts
from worker.features.cells import Grid, is_grid, window_features
from worker.features.kinds import name, start
from worker.features.text import Text, is_text

Features = dict[str, float]
# A leaf's readings: a number, a short string, a list of strings as a set and in order, a list
# of lines as a grid, a string of several words as text.
Value = float | str | frozenset[str] | tuple[str, ...] | Grid | Text

MAX_LIST_INDEX = 8  # numbers of a list beyond this index are left out (order kept up to it)
MAX_CONTEXT = 48  # context numbers a row's comparisons use (the first, in key order)
MAX_ALIGNED = 24  # aligned numbers per candidate that are compared with the context
MAX_LISTS = 8  # lists whose shapes (length, repeats, length differences) a row reports
MAX_CELL_SYMBOLS = 4  # a line of cells has at most this many distinct symbols
MAX_CROSSED_CANDIDATES = 8  # context features are crossed with the candidate up to this many
_CROSSED = (start("W"), start("WIN"))  # the context features crossed (words: not their pairs)

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


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Value]]:
    """(dotted path, value) for every leaf: numbers (bools as 0/1), short strings, strings of
    several words as text too, and lists of strings as sets, in order, as a grid when they are
    lines of cells and as text when some are; lists of numbers leaf by index (their order is
    kept), lists of objects too."""
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
    elif (number := _number(obj)) is not None:
        yield path, number
    elif isinstance(obj, str):
        if len(obj) <= texts.SHORT:
            yield path, obj.lower()
        if is_text(obj):
            yield path, Text(obj)


def _aligned(state: Any, names: set[str]) -> list[tuple[str, Any]]:
    """(path with the matched key as `*`, the sub-object) for the parts of the state about the
    candidate with these names."""
    found: list[tuple[str, Any]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}" if path else str(key)
                if str(key).lower() in names:
                    found.append((f"{path}.*" if path else "*", value))
                else:
                    walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node[:64]):
                tag = value.get("name", value.get("id")) if isinstance(value, dict) else None
                if isinstance(tag, str) and tag.lower() in names:
                    found.append((f"{path}.*", value))
                else:
                    walk(value, f"{path}.{i}")

    walk(state, "")
    return found


def _context(state: Any, aligned_roots: set[str]) -> list[tuple[str, Value]]:
    """Leaves of the state outside every candidate's aligned parts."""

    def outside(path: str) -> bool:
        return not any(path == root or path.startswith(root + ".") for root in aligned_roots)

    return [(p, v) for p, v in leaves(state) if outside(p)]


def nested(obj: Any) -> Any:
    """A state flattened to dotted keys (`state_compression: minimal` writes
    `{"routes.TRM_ONLY.cost": 1, ...}`: every value a leaf) read as the nested object it came
    from. Other states are left as they are: a dotted key there is a name (`route.local`)."""
    if not isinstance(obj, dict) or not any("." in str(k) for k in obj):
        return obj
    if any(
        isinstance(v, dict)
        or (
            isinstance(v, list)
            and v
            and not all(isinstance(x, str | int | float | bool) for x in v)
        )
        for v in obj.values()
    ):
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


def candidate_features(state: Any, tools: list[str]) -> list[Features]:
    """One dict of features per candidate of the row."""
    n = len(tools)
    names = [names_of(t) for t in tools]
    known = _state_names(state)
    numbered = [_numbers_outside_names(t, ns & known) for t, ns in zip(tools, names, strict=True)]
    aligned: list[list[tuple[str, Value]]] = []
    bags: list[dict[str, frozenset[str]]] = []
    roots: set[str] = set()
    for tool_names in names:
        mine: list[tuple[str, Value]] = []
        parts = _aligned(state, tool_names)
        bags.append(texts.aligned_bags(parts))
        for path, sub in parts:
            concrete = _concrete_root(state, path, tool_names)
            if concrete:
                roots.add(concrete)
            if isinstance(sub, dict | list):
                mine += [(f"{path}.{p}" if p else path, v) for p, v in leaves(sub)]
            else:
                mine += [(path, v) for _, v in leaves(sub)]
        aligned.append(mine)
    context = _context(state, roots)
    ctx_numbers = [(p, v) for p, v in context if isinstance(v, float)][:MAX_CONTEXT]
    ctx_strings = [(p, v) for p, v in context if isinstance(v, str)]
    ctx_sets = [(p, v) for p, v in context if isinstance(v, frozenset)]
    ctx_lists = [(p, v) for p, v in context if isinstance(v, tuple)]
    readings = texts.context_texts((p, v) for p, v in context if isinstance(v, Text))
    matches = texts.match_features(readings, bags, tools)
    number_lists = _number_lists(context)
    shared = texts.context_features(readings)
    shared.update(window_features([(p, v) for p, v in context if isinstance(v, Grid)],
                                  number_lists))  # fmt: skip
    shared.update(_list_differences(number_lists))
    by_value: dict[str, str] = {}  # a context string -> its path (the first with that value)
    for cpath, cstr in ctx_strings:
        by_value.setdefault(cstr, cpath)
    for mine in aligned:
        mine += _looked_up(mine, by_value)

    # Per aligned number, its values over the row's candidates (for ranks and distances).
    columns: dict[str, list[float]] = {}
    for mine in aligned:
        for path, value in mine:
            if isinstance(value, float):
                columns.setdefault(path, []).append(value)

    out: list[Features] = []
    for i, tool in enumerate(tools):
        # No count of candidates: anchors may offer twice as many as training did.
        f: Features = {"pos": i / max(1, n - 1)}
        for piece in pieces_of(tool):
            f[f"P:{piece}"] = 1.0
        own_numbers: list[tuple[str, float]] = []
        ids = id_numbers(numbered[i])
        for k, number in enumerate(ids):
            f[f"N:{k}"] = float(number)
            own_numbers.append((f"N:{k}", float(number)))
        for path, value in aligned[i]:
            key = f"A:{path}"
            if isinstance(value, float):
                f[key] = value
                column = columns[path]
                f[f"R:{path}"] = sum(v < value for v in column) / len(column)
                f[f"HI:{path}"] = value - max(column)
                f[f"LO:{path}"] = value - min(column)
                own_numbers.append((key, value))
            elif isinstance(value, frozenset):
                f[f"LEN:{path}"] = float(len(value))
                for cpath, cset in ctx_sets:
                    if cset:
                        f[f"COV:{path}|{cpath}"] = len(cset & value) / len(cset)
                for cpath, cstr in ctx_strings:
                    f[f"IN:{path}|{cpath}"] = float(cstr in value)
            elif isinstance(value, str):
                for cpath, cstr in ctx_strings:
                    if cstr == value:
                        f[f"EQ:{path}|{cpath}"] = 1.0
                if _is_cells(value):
                    own_numbers += _cells_at(value, path, ids, f)
        for key, value in own_numbers[:MAX_ALIGNED]:
            for cpath, cvalue in ctx_numbers:
                f[f"D:{key}|{cpath}"] = value - float(cvalue)
                f[f"GE:{key}|{cpath}"] = float(value >= cvalue)
        for cpath, cvalue in ctx_numbers:
            f[f"C:{cpath}"] = float(cvalue)
        for cpath, cset in ctx_sets:
            if names[i] & cset:
                f[f"NAME_IN:{cpath}"] = 1.0
        for cpath, cstr in ctx_strings:
            if cstr in names[i]:
                f[f"NAME_IN:{cpath}"] = 1.0
        for cpath, items in ctx_lists:
            places = [k for k, item in enumerate(items) if item in names[i]]
            if places:
                f[name("IDX", cpath)] = float(places[0])
                f[name("IDXE", cpath)] = float(len(items) - 1 - places[-1])
        f.update(matches[i])
        f.update(shared)
        if n <= MAX_CROSSED_CANDIDATES:
            f.update(_crossed(shared, tool))
        out.append(f)
    _ranks(matches, out)
    _id_number_ranks(numbered, out)
    _list_shapes(state, roots, out)
    return out


def _crossed(shared: Features, tool: str) -> Features:
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


def _ranks(numbers: list[Features], out: list[Features]) -> None:
    """`R:`, `HI:`, `LO:` of per-candidate numbers among the candidates that have them."""
    columns: dict[str, list[float]] = {}
    for mine in numbers:
        for key, value in mine.items():
            columns.setdefault(key, []).append(value)
    for mine, f in zip(numbers, out, strict=True):
        for key, value in mine.items():
            column = columns[key]
            f[name("R", key)] = sum(v < value for v in column) / len(column)
            f[name("HI", key)] = value - max(column)
            f[name("LO", key)] = value - min(column)


def _number_lists(context: list[tuple[str, Value]]) -> list[tuple[str, list[float]]]:
    """The context's lists of numbers (`pos.0`, `pos.1` -> `pos = [x, y]`), in order."""
    lists: dict[str, list[float]] = {}
    for path, value in context:
        parent, dot, index = path.rpartition(".")
        if dot and index.isdigit() and isinstance(value, float):
            numbers = lists.setdefault(parent, [])
            if int(index) == len(numbers):
                numbers.append(value)
    return list(lists.items())[:MAX_LISTS]


def _list_differences(lists: list[tuple[str, list[float]]]) -> Features:
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


def _looked_up(mine: list[tuple[str, Value]], by_value: dict[str, str]) -> list[tuple[str, Value]]:
    """An aligned field keyed by a context string (`by_value`: string -> its path), under the
    context's path: with `request.intent = "code"`, `routes.*.cap.code` is also
    `routes.*.cap.[request.intent]`, the cap that applies, whichever intent it is."""
    out: list[tuple[str, Value]] = []
    for path, value in mine:
        head, star, tail = path.partition("*")
        if not star:
            continue
        parts = tail.split(".")
        for k, part in enumerate(parts):
            source = by_value.get(part.lower()) if part else None
            if source is not None:
                looked = ".".join([*parts[:k], f"[{source}]", *parts[k + 1 :]])
                out.append((f"{head}*{looked}", value))
    return out


def _state_names(state: Any) -> set[str]:
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


def _numbers_outside_names(tool: str, names: set[str]) -> str:
    """The candidate's id with the digits of the names the state uses spelled as letters: in
    `place:cpu0@t3` the 0 is part of the machine `cpu0` (a key of the state), not a number, so
    the slot's time is its first number in every world (`place:lineA@t3`, `place:m2@t3`)."""
    low = tool.lower()
    for spelled in sorted(names, key=len, reverse=True):
        if spelled != low and any(c.isdigit() for c in spelled):
            low = low.replace(spelled, spelled.translate(_DIGITS_AS_LETTERS))
    return low


def _is_cells(text: str) -> bool:
    """A line of cells (`"..##m..."`: a machine's time slots, a row of a map): a short string
    of a few distinct symbols and no spaces, read by position, not as a word."""
    return 3 <= len(text) <= 64 and " " not in text and len(set(text)) <= MAX_CELL_SYMBOLS


def _cells_at(text: str, path: str, numbers: list[int], f: Features) -> list[tuple[str, float]]:
    """A line of cells aligned with the candidate, read at the candidate's own id numbers
    (`slot_oven_3` on `busy.oven`: the cell at 3): `AT:<line>|<k>:<symbol>` the symbol there,
    and `RUN:<line>|<k>:<symbol>` how many cells from there hold it (free slots ahead), under
    the symbol's name, so that its comparison with the context (`GE:RUN:busy.*|0:.|job.dur`:
    a free stretch at least the job's length) says what it is a run of."""
    runs: list[tuple[str, float]] = []
    for k, at in enumerate(numbers):
        if at >= len(text):
            f[f"AT:{path}|{k}:past"] = 1.0
            continue
        symbol, rest = text[at], text[at:]
        f[f"AT:{path}|{k}:{symbol}"] = 1.0
        key = f"RUN:{path}|{k}:{symbol}"
        f[key] = float(len(rest) - len(rest.lstrip(symbol)))
        runs.append((key, f[key]))
    return runs


def _id_number_ranks(tools: list[str], out: list[Features]) -> None:
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
            f[f"NR:{k}"] = sum(v < value for v in column) / len(column)
            f[f"NLO:{k}"] = value - min(column)
            f[f"GR:{k}"] = sum(v < value for v in group) / len(group)
            f[f"GLO:{k}"] = value - min(group)


def _list_shapes(state: Any, roots: set[str], out: list[Features]) -> None:
    """The shape of the state's lists outside the candidates' own parts (the same for every
    candidate): `L:<list>` its length, `DUP:<list>` its repeated items, and `LD:<a>|<b>` the
    difference of two lists' lengths (a proposal one step short of the jobs it should place,
    a plan that names a slot twice): what set-valued leaves alone cannot show."""
    shapes: list[tuple[str, list[Any]]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}" if path else str(key)
                if not any(here == r or here.startswith(r + ".") for r in roots):
                    walk(value, here)
        elif isinstance(node, list) and len(shapes) < MAX_LISTS:
            shapes.append((path, node))  # lists inside lists are items, not shapes

    walk(state, "")
    context: Features = {}
    for path, items in shapes:
        context[f"L:{path}"] = float(len(items))
        keys = [json.dumps(v, sort_keys=True) for v in items]
        context[f"DUP:{path}"] = float(len(keys) - len(set(keys)))
    for a, (pa, la) in enumerate(shapes):
        for pb, lb in shapes[a + 1 :]:
            context[f"LD:{pa}|{pb}"] = float(len(la) - len(lb))
    for f in out:
        f.update(context)


def _concrete_root(state: Any, generic: str, names: set[str]) -> str | None:
    """The concrete path of an aligned part (`routes.TRM_ONLY` for `routes.*`), so that context
    leaves under it are not counted twice."""
    parts = generic.split(".")
    node, path = state, []
    for part in parts:
        if part == "*":
            if isinstance(node, dict):
                key = next((k for k in node if str(k).lower() in names), None)
                if key is None:
                    return None
                path.append(str(key))
                node = node[key]
            elif isinstance(node, list):
                index = next(
                    (i for i, v in enumerate(node) if isinstance(v, dict)
                     and str(v.get("name", v.get("id"))).lower() in names),
                    None,
                )  # fmt: skip
                if index is None:
                    return None
                path.append(str(index))
                node = node[index]
            return ".".join(path)
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
        path.append(part)
    return ".".join(path)
