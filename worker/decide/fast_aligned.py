"""What a row's aligned parts alone give the decision-time encoder (`fast_encode.py`), worked out
once per distinct content of those parts: each candidate's aligned leaves and word bags, the
parts' concrete roots, and the features that read nothing but the parts and the candidate's id
(`pos`, `P:`, `N:`; an aligned number's `A:`, `R:`, `HI:`, `LO:`; a list's `LEN:`; a line of
cells' `AT:`/`RUN:`), with what the row's context is then compared with (the numbers, sets and
strings). The per-row rest (`COV:`, `IN:`, `EQ:`, `D:`, `GE:`, the context's own) is placed by
`fast_encode.py` from these.

A flat state's parts are cached by their values (`Layout.aligned`): the route blocks of
routerBench's rows repeat (535 anchor and val rows hold 17 distinct ones) while their requests
do not. The same values give the same leaves and features, so a cached record is the one the row
would have computed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from worker.decide.state_walk import ToolsInfo, leaves_into
from worker.features import aligned as al
from worker.features import ids
from worker.features import text as tx
from worker.features.cells import cells_at, is_cells
from worker.features.kinds import Features, name

Leaves = list[tuple[str, Any]]
RANKED = 4096  # text match names whose rank columns are kept looked up


class Reader(Protocol):
    """What these parts read of the decision-time encoder (`fast_encode.FastEncoder`): the
    feature space's columns, grouped by kind."""

    @property
    def index(self) -> Mapping[str, int]: ...
    @property
    def ranked(self) -> dict[str, tuple[int | None, ...]]: ...
    @property
    def single(self) -> Mapping[str, Mapping[str, int]]: ...
    @property
    def pairs(self) -> Mapping[str, Mapping[str, Mapping[str, int]]]: ...
    @property
    def pos(self) -> int | None: ...
    @property
    def set_paths(self) -> set[str]: ...
    @property
    def compared_keys(self) -> set[str]: ...
    @property
    def number_columns(self) -> Mapping[str, tuple[int | None, ...]]: ...
    @property
    def matches(self) -> bool: ...
    @property
    def crossed(self) -> Mapping[str, Mapping[str, int]]: ...
    @property
    def word_names(self) -> Mapping[str, Mapping[str, tuple[str, int | None, bool]]]: ...
    def put(self, features: dict[str, float], f: dict[int, float]) -> None: ...


@dataclass(frozen=True)
class Bags:
    """One aligned text path's bags over the candidates (`text.match_features`' `column`), with
    what reads them alone: the words' weights, their union, and per candidate its weight sum and
    the root of its squared weights (0 where its bag is empty)."""

    path: str
    column: list[frozenset[str]]
    weight: dict[str, float]
    union: frozenset[str]
    own: list[float]
    own_norm: list[float]


@dataclass(frozen=True)
class Aligned:
    """Per candidate: `leaves` its aligned leaves (path with `*`, value); `own` its numbers
    compared with the context, in the general encoder's order (`N:`, then each leaf's `A:` or
    cell runs); `sets` and `strings` its set and string leaves, for `COV:`/`IN:` and `EQ:`;
    `numbers` its id's numbers. `fixed` the features placed from the parts and the ids alone,
    as (candidates, columns, values) for one assignment; `roots` the parts' concrete paths (the
    context leaves outside them); `columns` each aligned number's values over the candidates
    (for the ranks); `matchers` the bags of each aligned text path and `names` the candidates'
    name words with their weights and sums, for the text matches (`match_features`)."""

    leaves: list[Leaves]
    roots: set[str]
    columns: dict[str, list[float]]
    fixed: tuple[np.ndarray, np.ndarray, np.ndarray]
    own: list[list[tuple[str, float]]]
    sets: list[list[tuple[str, frozenset[str]]]]
    strings: list[list[tuple[str, str]]]
    numbers: list[list[int]]
    matchers: list[Bags]
    names: tuple[list[frozenset[str]], dict[str, float], list[float]]
    segments: list[frozenset[str]]
    compared: Compared
    id_ranks: tuple[np.ndarray, np.ndarray, np.ndarray]


def aligned_of(
    enc: Reader,
    found_parts: list[list[tuple[str, Any]]],
    concretes: list[list[str | None]],
    info: ToolsInfo,
    numbered: list[str],
) -> Aligned:
    """`row.candidate_features`' aligned part of each candidate, as the general code walks it."""
    leaves: list[Leaves] = []
    bags: list[dict[str, frozenset[str]]] = []
    roots: set[str] = set()
    for parts, part_roots in zip(found_parts, concretes, strict=True):
        mine: Leaves = []
        if enc.matches:
            bags.append(tx.aligned_bags(parts))
        for (path, sub), concrete in zip(parts, part_roots, strict=True):
            if concrete:
                roots.add(concrete)
            found: Leaves = []
            leaves_into(sub, "", found, None)
            if isinstance(sub, dict | list):
                mine += [(f"{path}.{p}" if p else path, v) for p, v in found]
            else:
                mine += [(path, v) for _, v in found]
        leaves.append(mine)
    columns = number_columns(leaves)
    n = len(leaves)
    p_col, n_col = enc.single["P"], enc.single["N"]
    fixed, owns, sets, strings, numbers_of = [], [], [], [], []
    for i in range(n):
        f: dict[int, float] = {}
        # ids.id_features
        if enc.pos is not None:
            f[enc.pos] = i / max(1, n - 1)
        for piece in info.pieces[i]:
            j = p_col.get(piece)
            if j is not None:
                f[j] = 1.0
        numbers = ids.id_numbers(numbered[i])
        own: list[tuple[str, float]] = []
        for k, number in enumerate(numbers):
            j = n_col.get(str(k))
            if j is not None:
                f[j] = float(number)
            own.append((name("N", k), float(number)))
        mine_sets: list[tuple[str, frozenset[str]]] = []
        mine_strings: list[tuple[str, str]] = []
        place_leaves(enc, leaves[i], columns, numbers, f, own, mine_sets, mine_strings)
        fixed.append(f)
        owns.append(own)
        sets.append(mine_sets)
        strings.append(mine_strings)
        numbers_of.append(numbers)
    matchers: list[Bags] = []
    own_names: list[frozenset[str]] = []
    name_weight: dict[str, float] = {}
    if enc.matches:
        for apath in sorted({p for mine in bags for p in mine}):
            column = [mine.get(apath, frozenset()) for mine in bags]
            weight = tx._weights(column)
            matchers.append(
                Bags(
                    apath, column, weight, frozenset().union(*column),
                    [math.fsum(weight[w] for w in bag) for bag in column],
                    [math.sqrt(math.fsum(weight[w] ** 2 for w in bag)) for bag in column],
                )
            )  # fmt: skip
        own_names = [tx.name_words(t) for t in info.tools]
        name_weight = tx._weights(own_names)
    totals = [math.fsum(name_weight[w] for w in bag) for bag in own_names]
    # `aligned.looked_up` finds a field only where a part of its path after the `*` is a
    # context string: the parts, lower-case, each candidate's.
    segments = [
        frozenset(
            s.lower()
            for path, _ in mine
            for s in path.partition("*")[2].split(".")
            if s and "*" in path
        )
        for mine in leaves
    ]
    at = [i for i, f in enumerate(fixed) for _ in f]
    placed = (np.array(at, dtype=np.intp), np.array([j for f in fixed for j in f], dtype=np.intp),
              np.array([v for f in fixed for v in f.values()], dtype=np.float64))  # fmt: skip
    return Aligned(
        leaves, roots, columns, placed, owns, sets, strings, numbers_of, matchers,
        (own_names, name_weight, totals), segments, compared_of(enc, owns),
        id_ranks(enc, numbered),
    )  # fmt: skip


def id_ranks(enc: Reader, numbered: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`ids.id_number_ranks` of the candidates' ids (the state's names spelled out): the kept
    ones as (candidates, columns, values)."""
    later: list[Features] = [{} for _ in numbered]
    ids.id_number_ranks(numbered, later)
    at: list[int] = []
    columns: list[int] = []
    values: list[float] = []
    get = enc.index.get
    for i, features in enumerate(later):
        for feature, value in features.items():
            j = get(feature)
            if j is not None:
                at.append(i)
                columns.append(j)
                values.append(value)
    return (
        np.array(at, dtype=np.intp),
        np.array(columns, dtype=np.intp),
        np.array(values, dtype=np.float64),
    )


@dataclass(frozen=True)
class Compared:
    """`aligned.compared` of the candidates' own numbers, as arrays over every (candidate,
    column) it may set: `at`, `columns`, the candidate's `numbers`, `paths` the index in
    `context` of the context path each is compared with, `ge` whether it is `GE:` (else `D:`).
    In the general order, a (candidate, column) once at its last place (the last sets it)."""

    at: np.ndarray
    columns: np.ndarray
    numbers: np.ndarray
    paths: np.ndarray
    ge: np.ndarray
    context: tuple[str, ...]

    def place(self, number_at: dict[str, float], skip: list[int], out: np.ndarray) -> None:
        """Into `out`, against the row's context numbers (`number_at`: path -> its last
        number); a column is set where the row has that path's number; candidates in `skip`
        are left out (their own numbers are the row's)."""
        if not len(self.at):
            return
        found = [number_at.get(p) for p in self.context]
        if not skip and None not in found:  # every path has its number: every column is set
            ctx = np.array(found, dtype=np.float64)[self.paths]
            out[self.at, self.columns] = np.where(self.ge, self.numbers >= ctx, self.numbers - ctx)
            return
        have = np.array([c is not None for c in found])[self.paths]
        if skip:
            have &= ~np.isin(self.at, skip)
        ctx = np.array([0.0 if c is None else c for c in found], dtype=np.float64)[self.paths]
        values = np.where(self.ge, (self.numbers >= ctx).astype(np.float64), self.numbers - ctx)
        out[self.at[have], self.columns[have]] = values[have]


def compared_of(enc: Reader, owns: list[list[tuple[str, float]]]) -> Compared:
    """The candidates' `Compared` from their own numbers."""
    d_pairs, ge_pairs, keys = enc.pairs["D"], enc.pairs["GE"], enc.compared_keys
    last: dict[tuple[int, int], tuple[float, str, bool]] = {}
    for i, own in enumerate(owns):
        for key, value in own[: al.MAX_ALIGNED]:
            if key not in keys:
                continue
            for ge, pairs in ((False, d_pairs), (True, ge_pairs)):
                for cpath, j in pairs.get(key, {}).items():
                    last.pop((i, j), None)
                    last[(i, j)] = (value, cpath, ge)
    context = tuple(dict.fromkeys(c for _, c, _ in last.values()))
    where = {c: k for k, c in enumerate(context)}
    return Compared(
        np.array([i for i, _ in last], dtype=np.intp),
        np.array([j for _, j in last], dtype=np.intp),
        np.array([v for v, _, _ in last.values()], dtype=np.float64),
        np.array([where[c] for _, c, _ in last.values()], dtype=np.intp),
        np.array([g for _, _, g in last.values()], dtype=bool),
        context,
    )


def match_features(part: Aligned, readings: dict[str, tx.Reading], n: int) -> list[Features]:
    """`text.match_features` (`TO:`, `TC:`, `TCOS:`, `TN:` of each candidate) with what the bags
    alone give taken from `part`, and what the context alone gives worked out once a context
    text rather than once a candidate. Every sum is `math.fsum` as there (exact: its order does
    not change it), so the values are the general code's."""
    out: list[Features] = [{} for _ in range(n)]
    texts = list(readings.items())[: tx.MAX_CONTEXT_TEXTS]
    if not texts:
        return out
    for bags in part.matchers:
        weight, apath = bags.weight, bags.path
        for cpath, reading in texts:
            context = reading.bag
            anyone = bags.union & context
            reachable = math.fsum(weight[w] for w in anyone)
            reach_norm = math.sqrt(math.fsum(weight[w] ** 2 for w in anyone))
            to, tc, tcos = (
                name("TO", apath, cpath),
                name("TC", apath, cpath),
                name("TCOS", apath, cpath),
            )
            for f, bag, own, own_norm in zip(
                out, bags.column, bags.own, bags.own_norm, strict=True
            ):
                if not bag:
                    continue
                shared = bag & context
                hit = math.fsum(weight[w] for w in shared)
                norm = own_norm * reach_norm
                squares = math.fsum(weight[w] ** 2 for w in shared)
                f[to] = hit / own if own > 0 else 0.0
                f[tc] = hit / reachable if reachable > 0 else 0.0
                f[tcos] = squares / norm if norm else 0.0
    own_names, weight, totals = part.names
    for cpath, reading in texts:
        tn = name("TN", cpath)
        for f, bag, total in zip(out, own_names, totals, strict=True):
            if total > 0:
                f[tn] = math.fsum(weight[w] for w in bag & reading.bag) / total
    return out


def number_columns(leaves: list[Leaves]) -> dict[str, list[float]]:
    """Each aligned number's values over the candidates, in candidate order."""
    columns: dict[str, list[float]] = {}
    for mine in leaves:
        for path, value in mine:
            if isinstance(value, float):
                columns.setdefault(path, []).append(value)
    return columns


def place_leaves(
    enc: Reader,
    leaves: Leaves,
    columns: dict[str, list[float]],
    numbers: list[int],
    f: dict[int, float],
    own: list[tuple[str, float]],
    sets: list[tuple[str, frozenset[str]]],
    strings: list[tuple[str, str]],
) -> None:
    """`aligned.aligned_features` of these leaves for what reads only them: `A:`, `R:`, `HI:`,
    `LO:`, `LEN:`, cells into `f`; the numbers to compare into `own`, the sets and strings the
    context is matched against into `sets` and `strings`."""
    len_col, eq, matched = enc.single["LEN"], enc.pairs["EQ"], enc.set_paths
    for path, value in leaves:
        if isinstance(value, float):
            kept = enc.number_columns.get(path)
            if kept is not None:
                a, r, hi, lo = kept
                column = columns[path]
                if a is not None:
                    f[a] = value
                if r is not None:
                    f[r] = sum(v < value for v in column) / len(column)
                if hi is not None:
                    f[hi] = value - max(column)
                if lo is not None:
                    f[lo] = value - min(column)
            own.append((name("A", path), value))
        elif isinstance(value, frozenset):
            j = len_col.get(path)
            if j is not None:
                f[j] = float(len(value))
            if path in matched:
                sets.append((path, value))
        elif isinstance(value, str):
            if path in eq:
                strings.append((path, value))
            if is_cells(value):
                cells: dict[str, float] = {}
                own += cells_at(value, path, numbers, cells)
                enc.put(cells, f)


def values_key(parsed: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    """A flat state's values at `keys`, hashable and typed (`true` is not `1`, `1` not `1.0`:
    what the general code reads of them may differ): their types, then the values (a list as
    its items and their types)."""
    values = [parsed[key] for key in keys]
    types = tuple(map(type, values))
    if list in types:
        values = [
            (tuple(v), tuple(map(type, v))) if t is list else v
            for v, t in zip(values, types, strict=True)
        ]
    return types, tuple(values)


def match_ranks(
    enc: Reader,
    matches: list[Features],
    width: int,
    into: tuple[list[int], list[float]],
) -> None:
    """`aligned.ranks` of the text matches (`R:`, `HI:`, `LO:` of each among the candidates that
    have it), only where the space keeps the column: (candidate * width + column, value) into
    `into`."""
    flat, values = into
    by_key: dict[str, list[tuple[int, float]]] = {}
    for i, mine in enumerate(matches):
        for key, value in mine.items():
            found = by_key.get(key)
            if found is None:
                by_key[key] = [(i, value)]
            else:
                found.append((i, value))
    ranked = enc.ranked
    for key, got in by_key.items():
        kept = ranked.get(key)
        if kept is None:
            if len(ranked) >= RANKED:
                ranked.clear()
            kept = ranked[key] = tuple(enc.index.get(name(k, key)) for k in ("R", "HI", "LO"))
        r, hi, lo = kept
        if r is None and hi is None and lo is None:
            continue
        column = [v for _, v in got]
        top, bottom, count = max(column), min(column), len(column)
        for i, found_value in got:
            base = i * width
            if r is not None:
                flat.append(base + r)
                values.append(sum(v < found_value for v in column) / count)
            if hi is not None:
                flat.append(base + hi)
                values.append(found_value - top)
            if lo is not None:
                flat.append(base + lo)
                values.append(found_value - bottom)


def text_columns(
    enc: Reader, readings: dict[str, tx.Reading]
) -> tuple[dict[int, float], dict[str, float]]:
    """`text.context_features` of the context texts (`W:`, `TS:`: the same for every candidate):
    the kept ones by column, and the `W:` ones a candidate may cross (`context.crossed`: no
    space in the name) by name, read only where the space crosses any."""
    shared_cols: dict[int, float] = {}
    # The crossable ones (`context.crossed`: `W:`/`WIN:` names without a space) by name.
    crossable: dict[str, float] = {}
    for tpath, reading in readings.items():
        if not enc.crossed:  # nothing reads them by name: their columns directly
            for kind, read in (("W", reading.counts), ("TS", reading.stats)):
                wanted = enc.pairs[kind].get(tpath)
                if wanted:
                    for key, value in read.items():
                        if (j := wanted.get(key)) is not None:
                            shared_cols[j] = float(value)
            continue
        words = enc.word_names.get(tpath)
        if words:
            for word, count in reading.counts.items():
                found = words.get(word)
                if found is not None:
                    feature, j, cross = found
                    if j is not None:
                        shared_cols[j] = float(count)
                    if cross:
                        crossable[feature] = float(count)
        stats = enc.pairs["TS"].get(tpath)  # `TS:` names are never crossed
        if stats:
            for stat, value in reading.stats.items():
                if (j := stats.get(stat)) is not None:
                    shared_cols[j] = value
    return shared_cols, crossable


def put_flat(out: np.ndarray, flat: list[int], values: list[float]) -> None:
    """`out[i, j] = value` for each flat index `i * width + j` of a row's block. The lists are
    made arrays by `np.fromiter` (a third of `np.array`'s time on a row's ~90 entries: no type
    to discover)."""
    n = len(flat)
    at = np.fromiter(flat, dtype=np.intp, count=n)
    got = np.fromiter(values, dtype=np.float64, count=n)
    if out.flags.c_contiguous:
        out.reshape(-1)[at] = got
    else:  # pragma: no cover - raw() hands each row a contiguous block
        out[np.divmod(at, out.shape[1])] = got
