"""Reading a state for the decision-time encoder (worker/decide/fast_encode.py): what a candidate
list alone gives, a flat state's layout, the aligned parts of a state of objects, the context
leaves, sorted by kind in one pass with the context's lists of numbers, and the context texts,
each the same as the general code's (`worker/features/context.py`, `aligned.py`, `text.py`)
without its generators or a second pass."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from worker.features import context as cx
from worker.features import ids
from worker.features import text as tx
from worker.features.cells import Grid, is_grid
from worker.features.text import Text
from worker.features.values import number_of


def parse_json(text: str | bytes) -> Any:
    """`json.loads`' value of a JSON text (a state's, a request body's), by orjson (a third of
    its time on routerBench's states); by `json` where orjson refuses it and `json` reads it
    (`NaN`, a lone surrogate's escape, UTF-16 bytes) and where it holds a run of 19 digits or
    more (orjson reads an integer past 64 bits as a float, `json` as the integer), so the values
    are `json`'s. A text neither reads is `json`'s error (a ValueError)."""
    if not has_long_run(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def has_long_run(text: str | bytes) -> bool:
    """Whether `text` holds 19 ASCII digits in a row (`[0-9]{19}`). Its UTF-8 bytes (a lone
    surrogate's too) with every digit made `0` and every other byte a space, searched for 19
    `0`s: a seventh of the regular expression's time on a routerBench state (the expression
    tries a match at every digit). A character past ASCII is bytes past ASCII in UTF-8, so the
    runs are the text's own."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return _RUN in data.translate(_DIGITS)


_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))  # a digit -> `0`, else ` `
_RUN = b"0" * 19


class ToolsInfo:
    """What a candidate list alone gives: each candidate's names, lower-case id and word pieces."""

    def __init__(self, tools: tuple[str, ...]) -> None:
        self.tools = tools
        self.names = [ids.names_of(t) for t in tools]
        self.lows = [t.lower() for t in tools]
        self.pieces = [ids.pieces_of(t) for t in tools]


@dataclass(frozen=True)
class Layout:
    """What a flat state's keys and the candidates alone decide (`flat_signature`): each
    candidate's id with the state's names spelled out (`ids.numbers_outside_names`), its aligned
    parts as (path with `*`, the keys that reach the part), each part's concrete root, and the
    state's keys that lie in a part (`aligned_keys`: their values alone make the parts).
    `aligned` keeps what those values gave (`fast_aligned.Aligned`), by the values."""

    numbered: list[str]
    parts: list[list[tuple[str, tuple[str, ...]]]]
    roots: list[list[str | None]]
    aligned_keys: tuple[str, ...]
    walk: FlatWalk
    aligned: dict[bytes | tuple[Any, ...], Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class FlatWalk:
    """How the general code walks the nested object of a flat state with these keys, read off
    the keys alone (`context.nested` makes its dicts from them: a key's value is never a dict):
    `leaves` each leaf's JSON key and its path in the walk, in the walk's order (a key that a
    later one turned into a dict is not there; `.a` is walked as `a`); `tags` the keys of each
    dict that could hold a plan's tags (`plans._find_plan`: a dict of leaves beside a leaf that
    could be the plan's list), a plan possible only where one of them holds strings alone.
    `outside` the walk outside each set of aligned roots, computed once per set."""

    leaves: tuple[tuple[str, str], ...]
    tags: tuple[tuple[str, ...], ...]
    outside: dict[frozenset[str], tuple[tuple[str, str, Any], ...]] = field(
        default_factory=dict, compare=False
    )

    @classmethod
    def of(cls, parsed: dict[str, Any]) -> FlatWalk:
        """From one state's parsed JSON (`flat_signature` not None) and its nested object."""
        leaves: list[tuple[str, str]] = []
        tags: list[tuple[str, ...]] = []

        def walk(node: dict[str, Any], path: str, keys: tuple[str, ...]) -> None:
            has_leaf = any(not isinstance(v, dict) for v in node.values())
            for key, value in node.items():
                here = f"{path}.{key}" if path else str(key)
                if isinstance(value, dict):
                    within = [(*keys, key, k) for k, v in value.items()]
                    if has_leaf and all(not isinstance(v, dict) for v in value.values()):
                        tags.append(tuple(".".join(k) for k in within))
                    walk(value, here, (*keys, key))
                else:
                    leaves.append((".".join((*keys, key)), here))

        nested = cx.nested(parsed)
        walk(nested, "", ())
        return cls(tuple(leaves), tuple(tags))

    def context(self, roots: set[str]) -> tuple[tuple[str, str, Any], ...]:
        """The leaves outside `roots` (their paths not `context.inside` them), each with its
        place in a list of numbers (`list_place`)."""
        key = frozenset(roots)
        found = self.outside.get(key)
        if found is None:
            found = tuple(
                (k, p, list_place(p)) for k, p in self.leaves if not (roots and cx.inside(p, roots))
            )
            if len(self.outside) >= 64:
                self.outside.clear()
            self.outside[key] = found
        return found

    def may_plan(self, parsed: dict[str, Any]) -> bool:
        """False where `plans._find_plan` finds nothing in this state: no dict of its tags
        candidates holds strings alone."""
        for keys in self.tags:  # loops, not generators: most states end at a tag's first key
            for k in keys:
                if not isinstance(parsed[k], str):
                    break
            else:
                return True
        return False


def flat_context(
    parsed: dict[str, Any], leaves: tuple[tuple[str, str, Any], ...], roots: set[str]
) -> list[tuple[str, Any]]:
    """`context_leaves` of a flat state's nested object, from its parsed JSON and the walk's
    leaves outside `roots` (`FlatWalk.context`): each leaf's value read as the walk reads it
    (`leaves_into`; a number or a string read here directly, as it reads them)."""
    out: list[tuple[str, Any]] = []
    append = out.append
    for key, path, _ in leaves:
        value = parsed[key]
        kind = type(value)
        if kind is float or kind is int:
            if math.isfinite(value):  # `values.number_of`
                append((path, float(value)))
        elif kind is bool:
            append((path, float(value)))
        elif kind is str:
            if len(value) <= tx.SHORT:
                append((path, value.lower()))
            if is_text(value):
                append((path, Text(value)))
        elif value is not None:
            leaves_into(value, path, out, roots)
    return out


def flat_signature(parsed: Any) -> tuple[str, ...] | None:
    """A state's JSON keys, when they alone decide its shape: an object whose values are
    numbers, strings, bools, nulls or lists of numbers, strings and bools (a `minimal`
    compression's dotted keys, `context.nested` makes them nested objects from the keys alone).
    Such a state's names (`ids.state_names`), aligned parts and their roots depend only on its
    keys and the candidates. None for any other state."""
    if not isinstance(parsed, dict):
        return None
    for value in parsed.values():
        kind = type(value)
        if kind in _FLAT:
            continue
        if kind is list or isinstance(value, list):
            for x in value:
                if type(x) not in _ITEMS and not isinstance(x, str | int | float):
                    return None
        elif isinstance(value, dict):
            return None
    return tuple(parsed)


# A flat state's values and list items by their exact type (a JSON parser's), checked first.
_FLAT = frozenset((str, int, float, bool, type(None)))
_ITEMS = frozenset((str, int, float, bool))


def dict_parts(state: Any, names: list[set[str]]) -> list[list[tuple[str, tuple[str, ...]]]]:
    """`aligned.aligned_parts` of a state of objects alone, each part as the keys reaching it."""
    found: list[list[tuple[str, tuple[str, ...]]]] = [[] for _ in names]

    def walk(node: Any, path: str, keys: tuple[str, ...], active: list[int]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                low, rest = str(key).lower(), []
                for c in active:
                    if low in names[c]:
                        found[c].append((f"{path}.*" if path else "*", (*keys, key)))
                    else:
                        rest.append(c)
                if rest:
                    walk(value, f"{path}.{key}" if path else str(key), (*keys, key), rest)

    walk(state, "", (), list(range(len(names))))
    return found


def at_keys(state: Any, keys: tuple[str, ...]) -> Any:
    node = state
    for key in keys:
        node = node[key]
    return node


def context_leaves(state: Any, roots: set[str]) -> list[tuple[str, Any]]:
    """`context.context_leaves`: the state's leaves outside the aligned roots, a branch inside
    one left unwalked (every leaf under it would be dropped)."""
    if not isinstance(state, dict):
        return cx.context_leaves(state, roots)
    out: list[tuple[str, Any]] = []
    leaves_into(state, "", out, roots)
    return out


def leaves_into(obj: Any, path: str, out: list[tuple[str, Any]], roots: set[str] | None) -> None:
    """`context.leaves` into a list, without a generator per node; with `roots`, a branch whose
    path is inside them (`context.inside`) is skipped: its leaves' paths all start with it."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            here = f"{path}.{key}" if path else str(key)
            if not (roots and cx.inside(here, roots)):
                leaves_into(value, here, out, roots)
    elif isinstance(obj, list):
        if obj and all(isinstance(v, str) for v in obj):
            out += [(path, v) for v in string_list(obj)]
        else:
            for i, value in enumerate(obj[: cx.MAX_LIST_INDEX]):
                here = f"{path}.{i}"
                if not (roots and cx.inside(here, roots)):
                    leaves_into(value, here, out, roots)
    elif (number := number_of(obj)) is not None:
        out.append((path, number))
    elif isinstance(obj, str):
        if len(obj) <= tx.SHORT:
            out.append((path, obj.lower()))
        if is_text(obj):
            out.append((path, Text(obj)))


def string_list(items: list[str]) -> tuple[Any, ...]:
    """What `context.leaves` reads of a list of strings, in its order: their set and tuple, in
    lower case, the list as a grid where it is one, its texts as one text. Kept by the list's
    items (states repeat their lists: a candidate list's names); each is immutable."""
    return _string_list(tuple(items))


@lru_cache(maxsize=1 << 12)
def _string_list(items: tuple[str, ...]) -> tuple[Any, ...]:
    lowered = tuple(v.lower() for v in items)
    made: list[Any] = [frozenset(lowered), lowered]
    if is_grid(list(items)):
        made.append(Grid(items))
    if words := [v for v in items if is_text(v)]:
        made.append(Text("\n".join(words)))
    return tuple(made)


# `text.is_text` of the strings seen (states repeat their strings).
is_text = lru_cache(maxsize=1 << 16)(tx.is_text)


@dataclass(slots=True)
class Sorted:
    """A row's context leaves by kind, in their order (the last number, string of a path is
    the one its name keeps), the first path of each string (`by_value`), the context's lists
    of numbers (`context.number_lists`), and a flat state's lists (`flat_sorted`)."""

    numbers: list[tuple[str, float]] = field(default_factory=list)
    strings: list[tuple[str, str]] = field(default_factory=list)
    sets: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    lists: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    grids: list[tuple[str, Grid]] = field(default_factory=list)
    texts: list[tuple[str, Text]] = field(default_factory=list)
    by_value: dict[str, str] = field(default_factory=dict)
    number_lists: list[tuple[str, list[float]]] = field(default_factory=list)
    shapes: list[tuple[str, list[Any]]] = field(default_factory=list)


# A number's path as `context.number_lists` splits it: (its list's path, its index), or None
# where it is no list's item.
PLACES: dict[str, tuple[str, int] | None] = {}
UNSPLIT = ("", -1)  # `list_place` of a path whose index `int` may not read: split when met


def list_place(cpath: str) -> tuple[str, int] | None:
    """`PLACES`' entry of a path, worked out ahead (`FlatWalk.context`); `UNSPLIT` where its
    last part is digits `int` may refuse (not ASCII: split when a number is met there, as
    `sort_context` splits it)."""
    parent, dot, index = cpath.rpartition(".")
    if not (dot and index.isdigit()):
        return None
    return (parent, int(index)) if index.isascii() else UNSPLIT


def sort_context(context: list[tuple[str, Any]]) -> Sorted:
    """The context's leaves sorted by kind in one pass, its lists of numbers gathered on the
    way (`context.number_lists`: a number at `<list>.<i>` is the list's item when it comes
    next, the lists in the order they are first met)."""
    out = Sorted()
    lists: dict[str, list[float]] = {}
    _sort_into(out, lists, context)
    if lists:
        out.number_lists = list(lists.items())[: cx.MAX_LISTS]
    return out


def flat_sorted(
    parsed: dict[str, Any], leaves: tuple[tuple[str, str, Any], ...], roots: set[str]
) -> Sorted:
    """`sort_context(flat_context(parsed, leaves, roots))` without the list between them: a
    number or a string leaf sorted as it is read, each number's list place worked out ahead
    (`FlatWalk.context`); with the lists among the leaves, as `context.list_shapes` meets them
    (`shapes`)."""
    out = Sorted()
    numbers, strings, texts, by_value = out.numbers, out.strings, out.texts, out.by_value
    shapes = out.shapes
    lists: dict[str, list[float]] = {}
    short = tx.SHORT
    for key, path, place in leaves:
        value = parsed[key]
        kind = type(value)
        if kind is float or kind is int or kind is bool:
            if kind is bool or math.isfinite(value):  # `values.number_of`
                number = float(value)
                numbers.append((path, number))
                if place is UNSPLIT:
                    place = _place(path)
                if place is not None:
                    items = lists.setdefault(place[0], [])
                    if place[1] == len(items):
                        items.append(number)
        elif kind is str:
            if len(value) <= short:
                low = value.lower()
                strings.append((path, low))
                by_value.setdefault(low, path)
            if is_text(value):
                texts.append((path, Text(value)))
        elif value is not None:
            if isinstance(value, list):
                shapes.append((path, value))
            found: list[tuple[str, Any]] = []
            leaves_into(value, path, found, roots)
            _sort_into(out, lists, found)
    if lists:
        out.number_lists = list(lists.items())[: cx.MAX_LISTS]
    del shapes[cx.MAX_LISTS :]
    return out


def _place(cpath: str) -> tuple[str, int] | None:
    try:
        return PLACES[cpath]
    except KeyError:
        pass
    parent, dot, index = cpath.rpartition(".")
    place = (parent, int(index)) if dot and index.isdigit() else None
    if len(PLACES) >= 1 << 14:
        PLACES.clear()
    PLACES[cpath] = place
    return place


def _sort_into(out: Sorted, lists: dict[str, list[float]], context: list[tuple[str, Any]]) -> None:
    numbers, strings, by_value = out.numbers, out.strings, out.by_value
    places = PLACES
    for cpath, value in context:
        if isinstance(value, float):
            numbers.append((cpath, value))
            try:
                place = places[cpath]
            except KeyError:
                place = _place(cpath)
            if place is not None:
                items = lists.setdefault(place[0], [])
                if place[1] == len(items):
                    items.append(value)
        elif isinstance(value, str):
            strings.append((cpath, value))
            by_value.setdefault(value, cpath)
        elif isinstance(value, frozenset):
            out.sets.append((cpath, value))
        elif isinstance(value, tuple):
            out.lists.append((cpath, value))
        elif isinstance(value, Grid):
            out.grids.append((cpath, value))
        elif isinstance(value, Text):
            out.texts.append((cpath, value))


TEXT_PATHS: dict[str, str] = {}  # `text.text_path` of the paths seen


def context_texts(texts: list[tuple[str, Text]]) -> dict[str, tx.Reading]:
    """`text.context_texts`, each path's group (`text.text_path`) kept once worked out."""
    grouped: dict[str, list[str]] = {}
    paths = TEXT_PATHS
    for path, text in texts:
        group = paths.get(path)
        if group is None:
            if len(paths) >= 1 << 14:
                paths.clear()
            group = paths[path] = tx.text_path(path)
        grouped.setdefault(group, []).append(text.raw)
    return {path: tx.read("\n".join(raws)) for path, raws in grouped.items()}
