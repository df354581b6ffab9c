"""A call's raw matrix for the decision-time encoder (`fast_encode.py`), assembled once for all
its rows: each row hands over what it writes, kind by kind, and each kind is written for every
row in one numpy assignment when the call's rows are all read (a handful of numpy calls a call
rather than a dozen a row, each with its fixed cost).

The kinds are written in the order a row wrote them into its block, one after the other: the
context's (the same for every candidate of a row), the parts' (`fast_aligned.Aligned.fixed`),
each candidate's own, the comparisons with the context's numbers (`Aligned.compared`), the id
ranks, the text matches' ranks, then a plan's. Rows never share a cell, so writing one kind for
every row and then the next leaves each cell what the row's own order left it; within a kind a
row writes a cell once (each kind is gathered by cell). A row left to the general encoder is
written as its matrix, whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worker.decide.fast_matches import Kept, Matched, match_cells


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


@dataclass(frozen=True)
class Placed:
    """Cells of a row's block and their values, for one assignment: `flat` each cell as
    candidate * width + column, `values` its value."""

    flat: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, at: list[int], columns: list[int], values: list[float], width: int) -> Placed:
        return cls(
            np.array(at, dtype=np.intp) * width + np.array(columns, dtype=np.intp),
            np.array(values, dtype=np.float64),
        )


class Assembly:
    """The writes of a call's rows (`counts` candidates each) into its raw matrix, `width`
    features a candidate, gathered by kind; `matrix()` makes it (NaN where nothing is written).
    A row's `start` is its first candidate's place among the call's."""

    def __init__(self, width: int, counts: list[int], blank: np.ndarray | None = None) -> None:
        self.width = width
        self.counts = counts
        self.blank = blank  # a row's value where nothing is written; None: NaN throughout
        self.context_flat: list[int] = []  # row * width + column, the row's shared features
        self.context_values: list[float] = []
        self.fixed: list[tuple[int, Placed]] = []  # (start, the parts' cells)
        self.own_flat: list[int] = []  # start's cells (candidate * width + column), values
        self.own_values: list[float] = []
        self.compared: list[tuple[int, Compared, list[float | None], list[int]]] = []
        self.ranks: list[tuple[int, Placed]] = []  # (start, the id ranks' cells)
        self.matches: dict[Kept, Matched] = {}  # the text matches, by the columns kept
        self.plans: list[tuple[int, int, dict[int, float]]] = []  # (start, count, columns)
        self.whole: list[tuple[int, np.ndarray]] = []  # (start, the general encoder's matrix)

    def context(self, row: int, columns: dict[int, float]) -> None:
        """A row's shared features (every candidate of row `row` has them)."""
        at = row * self.width
        self.context_flat += [at + j for j in columns]
        self.context_values += columns.values()

    def compare(
        self, start: int, compared: Compared, found: list[float | None], skip: list[int]
    ) -> None:
        """A row's comparisons: `found` the row's number at each of `compared.context` (None
        where it has none: those columns are not set), `skip` the candidates left out."""
        if len(compared.at):
            self.compared.append((start, compared, found, skip))

    def matrix(self) -> np.ndarray:
        width, counts = self.width, self.counts
        if self.blank is None:
            rows = np.full((len(counts), width), np.nan, dtype=np.float64)
        else:
            rows = np.tile(self.blank, (len(counts), 1))
        if self.context_flat:
            rows.reshape(-1)[_indices(self.context_flat)] = _values(self.context_values)
        out = rows[np.repeat(np.arange(len(counts)), counts)]
        flat = out.reshape(-1)
        _put_placed(flat, self.fixed, width)
        if self.own_flat:
            flat[_indices(self.own_flat)] = _values(self.own_values)
        ranks = None
        if self.matches:
            (at, values), ranks = match_cells(self.matches, width)
            flat[at] = values
        if self.compared:
            self._compare(out)
        _put_placed(flat, self.ranks, width)
        if ranks is not None:
            at, values = ranks
            flat[at] = values
        for start, count, placed in self.plans:
            out[start : start + count, list(placed)] = list(placed.values())
        for start, whole in self.whole:
            if self.blank is not None:  # the general encoder's columns outside `blank`'s NaN
                whole = np.where(np.isnan(self.blank), whole, self.blank)
            out[start : start + len(whole)] = whole
        return out

    def _compare(self, out: np.ndarray) -> None:
        """`Compared.place` of every row at once: each row's candidates compared with its own
        context numbers, a column set where the row has its path's number."""
        got = self.compared
        lengths = [len(c.at) for _, c, _, _ in got]
        if len(got) == 1:  # a call of one row (or one with comparisons): its arrays as they are
            start, one, found, _ = got[0]
            at, columns, numbers, ge, paths = (
                one.at + start,
                one.columns,
                one.numbers,
                one.ge,
                one.paths,
            )
        else:
            at = np.concatenate([c.at for _, c, _, _ in got])
            at += np.repeat(np.array([start for start, _, _, _ in got], dtype=np.intp), lengths)
            columns = np.concatenate([c.columns for _, c, _, _ in got])
            numbers = np.concatenate([c.numbers for _, c, _, _ in got])
            ge = np.concatenate([c.ge for _, c, _, _ in got])
            # Each row's context numbers one after the other: a row's paths index its own.
            offsets: list[int] = []
            found = []
            for _, _, mine, _ in got:
                offsets.append(len(found))
                found += mine
            paths = np.concatenate([c.paths for _, c, _, _ in got])
            paths += np.repeat(np.array(offsets, dtype=np.intp), lengths)
        # A path without its number (None) is NaN here (a context number is finite): its
        # columns are left unset below, whatever NaN made of them.
        known = np.array(found, dtype=np.float64)
        absent = np.isnan(known)
        missing = bool(absent.any())
        ctx = known[paths]
        values = np.where(ge, (numbers >= ctx).astype(np.float64), numbers - ctx)
        skips = [k for k, (_, _, _, skip) in enumerate(got) if skip]
        if not missing and not skips:  # every path has its number: every column is set
            out[at, columns] = values
            return
        have = ~absent[paths]
        if skips:
            ends = np.cumsum(lengths)
            for k in skips:
                start, _, _, skip = got[k]
                part = slice(ends[k] - lengths[k], ends[k])
                have[part] &= ~np.isin(at[part] - start, skip)
        out[at[have], columns[have]] = values[have]


def _put_placed(flat: np.ndarray, placed: list[tuple[int, Placed]], width: int) -> None:
    if not placed:
        return
    if len(placed) == 1:
        start, one = placed[0]
        flat[one.flat + start * width] = one.values
        return
    lengths = [len(p.flat) for _, p in placed]
    at = np.concatenate([p.flat for _, p in placed])
    at += np.repeat(np.array([start * width for start, _ in placed], dtype=np.intp), lengths)
    flat[at] = np.concatenate([p.values for _, p in placed])


def _indices(flat: list[int]) -> np.ndarray:
    return np.fromiter(flat, dtype=np.intp, count=len(flat))


def _values(values: list[float]) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=len(values))
