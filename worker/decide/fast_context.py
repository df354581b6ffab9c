"""What a row's context alone gives the decision-time encoder (`fast_encode.py`), the same for
every candidate: the context texts' words and statistics (`W:`, `TS:`), the shapes of its
lists (`L:`, `DUP:`, `LD:`) and its strings as flags (`CS:`), each worked out only where the
space keeps its column."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from worker.decide.fast_kinds import splits
from worker.features import context as cx
from worker.features import text as tx
from worker.features.kinds import name, start

SHAPES = 4096  # list paths (and pairs) whose shape columns are kept looked up
K = TypeVar("K", int, str)  # a kept column: its index, or a crossable word column's name


class ShapeColumns:
    """`context.shape_features` of a state's lists, the kept columns alone (`L:` a list's
    length, `DUP:` its repeated items, `LD:` two lists' difference of lengths): the items are
    written out as JSON to find the repeats only where a `DUP:` column is kept."""

    def __init__(self, index: Mapping[str, int]) -> None:
        self.index = index
        self.single: dict[str, tuple[int | None, int | None]] = {}
        self.pairs: dict[tuple[str, str], int | None] = {}
        self.any_pair = any(n.startswith("LD:") for n in index)

    def __call__(self, shapes: list[tuple[str, list[Any]]]) -> dict[int, float]:
        out: dict[int, float] = {}
        for path, items in shapes:
            length, dup = self._single(path)
            if length is not None:
                out[length] = float(len(items))
            if dup is not None:
                keys = [json.dumps(v, sort_keys=True) for v in items]
                out[dup] = float(len(keys) - len(set(keys)))
        if self.any_pair:
            for a, (pa, la) in enumerate(shapes):
                for pb, lb in shapes[a + 1 :]:
                    j = self._pair(pa, pb)
                    if j is not None:
                        out[j] = float(len(la) - len(lb))
        return out

    def _single(self, path: str) -> tuple[int | None, int | None]:
        found = self.single.get(path)
        if found is None:
            if len(self.single) >= SHAPES:
                self.single.clear()
            get = self.index.get
            found = self.single[path] = (get(name("L", path)), get(name("DUP", path)))
        return found

    def _pair(self, a: str, b: str) -> int | None:
        key = (a, b)
        if key in self.pairs:
            return self.pairs[key]
        if len(self.pairs) >= SHAPES:
            self.pairs.clear()
        found = self.pairs[key] = self.index.get(name("LD", a, b))
        return found


class TextColumns:
    """`text.context_features` of the context texts (`W:`, `TS:`: the same for every
    candidate): the kept ones by column, and the `W:` ones a candidate may cross
    (`context.crossed`: no space in the name) by name, where the space crosses any.

    `words` the kept `W:` columns, per text path and word; `crossing` the crossable `W:` names
    a crossed column reads (`X:W:...`), per text path and word; `stats` the kept `TS:` columns
    per text path and statistic."""

    def __init__(
        self,
        words: Mapping[str, Mapping[str, int]],
        crossing: Mapping[str, Mapping[str, str]],
        stats: Mapping[str, Mapping[str, int]],
    ) -> None:
        self.words = words
        self.crossing = crossing
        self.stats = stats
        # Per text path and word, its kept column and its crossable name (None where not): a
        # text's words looked up once for both.
        self.either: dict[str, dict[str, tuple[int | None, str | None]]] = {}
        for tpath in {*words, *crossing}:
            mine, crossed = words.get(tpath, {}), crossing.get(tpath, {})
            self.either[tpath] = {w: (mine.get(w), crossed.get(w)) for w in {*mine, *crossed}}

    def __call__(
        self, readings: dict[str, tx.Reading]
    ) -> tuple[dict[int, float], dict[str, float]]:
        shared: dict[int, float] = {}
        crossable: dict[str, float] = {}
        for tpath, reading in readings.items():
            if either := self.either.get(tpath):
                get = either.get
                for word, count in reading.counts.items():
                    found = get(word)
                    if found is not None:
                        column, crossed = found
                        if column is not None:
                            shared[column] = float(count)
                        if crossed is not None:
                            crossable[crossed] = float(count)
            if stats := self.stats.get(tpath):  # `TS:` names are never crossed
                _pick(shared, stats, reading.stats)
        return shared, crossable


def _pick(into: dict[K, float], kept: Mapping[str, K], found: Mapping[str, float]) -> None:
    """`into[kept[key]] = value` for each of `found`'s keys that `kept` holds. A plain loop over
    a text's few words (a dozen), each looked up in the kept ones: a third less time than a
    comprehension a kind."""
    for key, value in found.items():
        column = kept.get(key)
        if column is not None:
            into[column] = float(value)


class FlagColumns:
    """`context.string_flags`' kept columns (`CS:`, a context string's value or an item of a
    context list of strings): the general code's names, looked up; none worked out when no
    `CS:` column is kept."""

    def __init__(self, index: Mapping[str, int]) -> None:
        self.columns = {n: j for n, j in index.items() if n.startswith(start("CS"))}
        # Every path a kept name may be read as (`CS:<path>:<value>`, split at each colon): a
        # list of strings under no such path has no item to look up.
        self.paths = {path for n in self.columns for path, _ in splits(n[len(start("CS")) :], ":")}

    def __call__(
        self,
        strings: list[tuple[str, str]],
        sets: list[tuple[str, frozenset[str]]],
        grids: list[tuple[str, Any]],
    ) -> dict[int, float]:
        """`string_flags` looked up first and read as categories after: only a kept name's
        value is asked whether it is one (the general code asks every string)."""
        if not self.columns:
            return {}
        out: dict[int, float] = {}
        get, category = self.columns.get, cx.category
        for path, value in strings:
            j = get(name("CS", path, value))
            if j is not None and category(value):
                out[j] = 1.0
        paths = self.paths
        grid_paths = {p for p, _ in grids} if grids else ()
        for path, items in sets:
            if path not in paths or path in grid_paths:
                continue
            for item in sorted(items)[: cx.MAX_FLAGGED]:
                j = get(name("CS", path, item))
                if j is not None and category(item):
                    out[j] = 1.0
        return out
