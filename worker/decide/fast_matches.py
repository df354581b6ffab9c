"""The text matches of the decision-time encoder (`fast_encode.py`): `text.match_features`
(`TO:`, `TC:`, `TCOS:`, `TN:` of each candidate against each context text) and their ranks
among the candidates (`aligned.ranks`: `R:`, `HI:`, `LO:`), handed to the call's `Assembly`
grouped by the columns kept of them rather than as per candidate names, and made cells for all
the call's rows at once (`match_cells`).

What the bags alone give comes from the row's aligned parts (`Bags`, cached with
them); what a context text alone gives is worked out once a text rather than once a candidate.
A match whose column and ranks the space keeps none of is not computed. Every sum is
`math.fsum` as in the general code (exact: its order does not change it), so the values are the
general code's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from worker.features import text as tx
from worker.features.kinds import name

MATCHED = 4096  # match names whose columns are kept looked up
Kept = tuple[int | None, int | None, int | None, int | None]  # a match's column, R, HI, LO
Three = tuple[Kept | None, Kept | None, Kept | None]  # `TO:`, `TC:`, `TCOS:`'s


@dataclass(frozen=True)
class Bags:
    """One aligned text path's bags over the candidates (`text.match_features`' `column`), with
    what reads them alone: the words' weights and their squares, their union, and per candidate
    its weight sum and the root of its squared weights (0 where its bag is empty)."""

    path: str
    column: list[frozenset[str]]
    weight: dict[str, float]
    square: dict[str, float]
    union: frozenset[str]
    own: list[float]
    own_norm: list[float]


class MatchColumns:
    """Per match name, the columns the space keeps of it: its own, its rank, its distance to
    the candidates' max and min (None where not kept); None where it keeps none."""

    def __init__(self, index: Mapping[str, int]) -> None:
        self.index = index
        self.found: dict[str, Kept | None] = {}
        self.pairs: dict[tuple[str, str], Three | None] = {}
        self.names: dict[str, Kept | None] = {}  # `TN:`'s, by context text path

    def of(self, apath: str, cpath: str) -> Three | None:
        """The columns kept of an aligned text path's `TO:`, `TC:`, `TCOS:` against a context
        text; None where none is kept."""
        key = (apath, cpath)
        try:
            return self.pairs[key]
        except KeyError:
            pass
        kept = (
            self(name("TO", apath, cpath)),
            self(name("TC", apath, cpath)),
            self(name("TCOS", apath, cpath)),
        )
        if len(self.pairs) >= MATCHED:
            self.pairs.clear()
        out = self.pairs[key] = None if kept == (None, None, None) else kept
        return out

    def names_of(self, cpath: str) -> Kept | None:
        """The columns kept of the candidates' names against a context text (`TN:`)."""
        try:
            return self.names[cpath]
        except KeyError:
            pass
        if len(self.names) >= MATCHED:
            self.names.clear()
        out = self.names[cpath] = self(name("TN", cpath))
        return out

    def __call__(self, feature: str) -> Kept | None:
        try:
            return self.found[feature]
        except KeyError:
            pass
        get = self.index.get
        kept: Kept = (get(feature), get(f"R:{feature}"), get(f"HI:{feature}"), get(f"LO:{feature}"))
        if len(self.found) >= MATCHED:
            self.found.clear()
        out = self.found[feature] = None if kept == (None, None, None, None) else kept
        return out


def place_matches(
    columns: MatchColumns,
    matchers: list[Bags],
    names: tuple[list[frozenset[str]], dict[str, float], list[float]],
    readings: dict[str, tx.Reading],
    into: dict[Kept, Matched],
    first: int,
) -> None:
    """The row's text matches (its first candidate `first` among the call's) into `into`, by
    the columns kept of each."""
    texts = list(readings.items())[: tx.MAX_CONTEXT_TEXTS]
    if not texts:
        return
    fsum = math.fsum
    for bags in matchers:
        weight, square, apath = bags.weight.__getitem__, bags.square.__getitem__, bags.path
        for cpath, reading in texts:
            kept = columns.of(apath, cpath)
            if kept is None:
                continue
            # The words any candidate shares with the text: a candidate's shared words are its
            # bag's among them (its bag is within the union).
            anyone = bags.union & reading.bag
            reachable = fsum(map(weight, anyone))
            reach_norm = math.sqrt(fsum(map(square, anyone)))
            at: list[int] = []
            to: list[float] = []
            tc: list[float] = []
            tcos: list[float] = []
            i = first
            for bag, own, own_norm in zip(bags.column, bags.own, bags.own_norm, strict=True):
                if bag:
                    shared = bag & anyone
                    hit = fsum(map(weight, shared))
                    norm = own_norm * reach_norm
                    squares = fsum(map(square, shared))
                    at.append(i)
                    to.append(hit / own if own > 0 else 0.0)
                    tc.append(hit / reachable if reachable > 0 else 0.0)
                    tcos.append(squares / norm if norm else 0.0)
                i += 1
            if at:
                for found, got in zip(kept, (to, tc, tcos), strict=True):
                    if found is not None:
                        _add(into, found, at, got)
    own_names, name_weight, totals = names
    for cpath, reading in texts:
        found = columns.names_of(cpath)
        if found is None:
            continue
        context = reading.bag
        at = [first + i for i, total in enumerate(totals) if total > 0]
        got = [
            math.fsum(map(name_weight.__getitem__, bag & context)) / total
            for bag, total in zip(own_names, totals, strict=True)
            if total > 0
        ]
        if at:
            _add(into, found, at, got)


def _add(into: dict[Kept, Matched], kept: Kept, at: list[int], got: list[float]) -> None:
    matched = into.get(kept)
    if matched is None:
        matched = into[kept] = Matched([], [], [])
    matched.at.extend(at)
    matched.values.extend(got)
    matched.sizes.append(len(at))


SMALL = 48  # a call's match values up to which their cells are worked out in Python


@dataclass(frozen=True)
class Matched:
    """A call's values of the matches that keep the same columns (`Kept`): each candidate's
    place among the call's (`at`) and value, one row's candidates after another (`sizes`: how
    many of each row's have it)."""

    at: list[int]
    values: list[float]
    sizes: list[int]


def match_cells(
    groups: dict[Kept, Matched], width: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A call's text matches as cells (flat indices, values): their own columns, then their
    ranks among each row's candidates that have them (`aligned.ranks`: the share of them below
    a value, its distance to their max and to their min), the kept ones. Over all the call's
    values at once in numpy; in Python for a few (a call of one row) or where one is NaN or
    negative (numpy's max and min differ from Python's, the general code's, on NaN and on the
    sign of a zero: not made by the matches, whose values are shares of weights)."""
    at_all: list[int] = []
    values_all: list[float] = []
    sizes: list[int] = []
    for matched in groups.values():
        at_all += matched.at
        values_all += matched.values
        sizes += matched.sizes
    values = np.array(values_all, dtype=np.float64)
    if len(values) <= SMALL or np.signbit(values).any() or np.isnan(values).any():
        kept = [k for k, matched in groups.items() for _ in matched.sizes]
        return _cells_by_row(at_all, values_all, sizes, kept, width)
    at = np.array(at_all, dtype=np.intp) * width
    counts = np.array(sizes, dtype=np.intp)
    starts = np.cumsum(counts) - counts
    segment = np.repeat(np.arange(len(counts)), counts)
    # Each value's own, R, HI, LO columns (-1: not kept): a group's values follow one another,
    # so its row of the table (one a group, not one a row's group) repeated over them.
    table = np.array([[-1 if c is None else c for c in k] for k in groups], dtype=np.intp)
    group = np.repeat(np.arange(len(groups)), [len(m.values) for m in groups.values()])
    columns = table[group]
    own = columns[:, 0] >= 0
    # The share below: each value against its row's values (NaN pads a shorter row).
    row = np.full((len(counts), int(counts.max())), np.nan)
    row[segment, np.arange(len(values)) - starts[segment]] = values
    below = (row[segment] < values[:, None]).sum(axis=1) / counts[segment]
    top = values - np.maximum.reduceat(values, starts)[segment]
    bottom = values - np.minimum.reduceat(values, starts)[segment]
    flat, out = [], []
    for k, found in ((1, below), (2, top), (3, bottom)):
        keep = columns[:, k] >= 0
        flat.append(at[keep] + columns[keep, k])
        out.append(found[keep])
    return (at[own] + columns[own, 0], values[own]), (np.concatenate(flat), np.concatenate(out))


def _cells_by_row(
    at_all: list[int], values: list[float], sizes: list[int], kept: list[Kept], width: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    own_flat: list[int] = []
    own: list[float] = []
    flat: list[int] = []
    out: list[float] = []
    start = 0
    for size, (j, r, hi, lo) in zip(sizes, kept, strict=True):
        at = [i * width for i in at_all[start : start + size]]
        column = values[start : start + size]
        start += size
        if j is not None:
            own_flat += [a + j for a in at]
            own += column
        if r is not None:
            flat += [a + r for a in at]
            out += [sum([u < v for u in column]) / size for v in column]
        if hi is not None:
            top = max(column)
            flat += [a + hi for a in at]
            out += [v - top for v in column]
        if lo is not None:
            bottom = min(column)
            flat += [a + lo for a in at]
            out += [v - bottom for v in column]
    return (
        (np.array(own_flat, dtype=np.intp), np.array(own, dtype=np.float64)),
        (np.array(flat, dtype=np.intp), np.array(out, dtype=np.float64)),
    )
