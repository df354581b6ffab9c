"""What a row's aligned parts alone give the decision-time encoder (`fast_encode.py`), worked out
once per distinct content of those parts: each candidate's aligned leaves and word bags, the
parts' concrete roots, and the features that read nothing but the parts and the candidate's id
(`pos`, `P:`, `N:`; an aligned number's `A:`, `R:`, `HI:`, `LO:`; a list's `LEN:`; a line of
cells' `AT:`/`RUN:`), with what the row's context is then compared with (the numbers, sets and
strings). The per-row rest (`COV:`, `IN:`, `EQ:`, `D:`, `GE:`, the context's own) is placed by
`fast_encode.py` from these; the text matches by `fast_matches.py` from the bags.

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
import orjson

from worker.decide.fast_batch import Compared, Placed
from worker.decide.fast_matches import Bags
from worker.decide.state_walk import ToolsInfo, leaves_into
from worker.features import aligned as al
from worker.features import ids
from worker.features import text as tx
from worker.features.cells import cells_at, is_cells
from worker.features.kinds import Features, name

Leaves = list[tuple[str, Any]]
# A candidate's set and string leaves as the context is matched against them: (context path,
# column, leaf) of each kept `COV:`, `IN:` and `EQ:`, in the general code's order.
Checks = tuple[
    list[tuple[str, int, frozenset[str]]],
    list[tuple[str, int, frozenset[str]]],
    list[tuple[str, int, str]],
]


class Reader(Protocol):
    """What these parts read of the decision-time encoder (`fast_encode.FastEncoder`): the
    feature space's columns, grouped by kind."""

    @property
    def index(self) -> Mapping[str, int]: ...
    @property
    def width(self) -> int: ...
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
    def put(self, features: dict[str, float], f: dict[int, float]) -> None: ...


@dataclass(frozen=True)
class Aligned:
    """Per candidate: `leaves` its aligned leaves (path with `*`, value); `own` its numbers
    compared with the context, in the general encoder's order (`N:`, then each leaf's `A:` or
    cell runs); `sets` and `strings` its set and string leaves, for `COV:`/`IN:` and `EQ:`
    (`checks`: the kept columns that match them);
    `numbers` its id's numbers. `fixed` the features placed from the parts and the ids alone,
    as the cells of the row's block (`fast_batch.Placed`); `roots` the parts' concrete paths (the
    context leaves outside them); `columns` each aligned number's values over the candidates
    (for the ranks); `matchers` the bags of each aligned text path and `names` the candidates'
    name words with their weights and sums, for the text matches (`fast_matches`)."""

    leaves: list[Leaves]
    roots: set[str]
    columns: dict[str, list[float]]
    fixed: Placed
    own: list[list[tuple[str, float]]]
    sets: list[list[tuple[str, frozenset[str]]]]
    strings: list[list[tuple[str, str]]]
    checks: list[Checks]
    numbers: list[list[int]]
    matchers: list[Bags]
    names: tuple[list[frozenset[str]], dict[str, float], list[float]]
    segments: list[frozenset[str]]
    compared: Compared
    id_ranks: Placed


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
            square = {w: x**2 for w, x in weight.items()}
            own_sums = [math.fsum(weight[w] for w in bag) for bag in column]
            norms = [math.sqrt(math.fsum(weight[w] ** 2 for w in bag)) for bag in column]
            union = frozenset().union(*column)
            matchers.append(Bags(apath, column, weight, square, union, own_sums, norms))
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
    columns_of = [j for f in fixed for j in f]
    placed = Placed.of(at, columns_of, [v for f in fixed for v in f.values()], enc.width)
    return Aligned(
        leaves=leaves,
        roots=roots,
        columns=columns,
        fixed=placed,
        own=owns,
        sets=sets,
        strings=strings,
        checks=[checks_of(enc, s, t) for s, t in zip(sets, strings, strict=True)],
        numbers=numbers_of,
        matchers=matchers,
        names=(own_names, name_weight, totals),
        segments=segments,
        compared=compared_of(enc, owns),
        id_ranks=id_ranks(enc, numbered),
    )


def id_ranks(enc: Reader, numbered: list[str]) -> Placed:
    """`ids.id_number_ranks` of the candidates' ids (the state's names spelled out): the kept
    ones' cells."""
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
    return Placed.of(at, columns, values, enc.width)


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


def checks_of(
    enc: Reader, sets: list[tuple[str, frozenset[str]]], strings: list[tuple[str, str]]
) -> Checks:
    """A candidate's `Checks` from its set and string leaves."""
    cov, inn, eq = enc.pairs["COV"], enc.pairs["IN"], enc.pairs["EQ"]
    return (
        [(c, j, v) for p, v in sets if p in cov for c, j in cov[p].items()],
        [(c, j, v) for p, v in sets if p in inn for c, j in inn[p].items()],
        [(c, j, t) for p, t in strings for c, j in eq[p].items()],
    )


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


def values_key(parsed: dict[str, Any], keys: tuple[str, ...]) -> bytes | tuple[Any, ...]:
    """A flat state's values at `keys`, hashable and typed (`true` is not `1`, `1` not `1.0`:
    what the general code reads of them may differ): written out as JSON by orjson (a tenth of
    the time of the tuples below on a routerBench state), which spells each value of a JSON
    parser's types apart (a float with its point or exponent, a string quoted); where it writes
    `null` (NaN and the infinities are `null` too) or cannot write a value (an integer past 64
    bits, a lone surrogate), their types, then the values (a list as its items and their types).
    """
    values = list(map(parsed.__getitem__, keys))
    try:
        written = orjson.dumps(values)
    except orjson.JSONEncodeError:
        pass
    else:
        if b"null" not in written:
            return written
    types = tuple(map(type, values))
    if list in types:
        values = [
            (tuple(v), tuple(map(type, v))) if t is list else v
            for v, t in zip(values, types, strict=True)
        ]
    return types, tuple(values)
