"""The decision-time encoder: a version's rows as the matrices its model reads, bit for bit the
general encoder's (`FeatureSpace.raw` / `.scaled`: `worker/features/` through
`worker/models/encoding.py`), in less time.

Compiled once per loaded version from its fitted feature space:

- **Only the features the model reads.** The general encoder spells every feature a row has
  (a routerBench candidate: ~130 names, of which its space keeps a few dozen) and then looks each
  one up; here each kind's kept names are split into their parts once (`D:<a>|<c>` under `a`,
  then `c`), so a row's loops skip what no column wants: the D/GE comparisons of an own number no
  kept name compares, the crossed words of a candidate no kept name crosses, the text matches
  when no kept name reads them.
- **Per-row work once.** The context's strings, sets and numbers are split once a row (the
  general encoder splits them again per candidate), in one pass that also gathers its lists of
  numbers (`state_walk.sort_context`; a flat state's as its JSON is read, `flat_sorted`); the
  shared context features are placed once and copied to every candidate's row.
- **Cached per candidate list.** A tools list's names and word pieces are worked out once.
- **Cached per layout.** A flat state (a `minimal` compression's dotted keys) has its names,
  aligned parts and their roots decided by its JSON keys and the candidates alone: they are
  worked out by the general code on the first row of those keys and candidates, checked there,
  and reused (`Layout`).
- **Vectorised over the batch.** A call's rows are one matrix, assembled once for all of them
  (`fast_batch.Assembly`: each row hands over its cells kind by kind, each kind written for
  every row in one numpy assignment); the text matches' ranks are worked out over the call's
  rows at once (`fast_matches`); the scaling runs once over the matrix.
- **Only the kept columns worked out.** A text match, a list's shape, a context text's words:
  computed only where the space keeps a column that reads them (`fast_matches`,
  `fast_context`).

Everything that decides *which* features exist and what they are worth is the general code
itself, called with the same inputs in the same order: the state's parsing and leaves, the
aligned parts, the text readings and matches, grids, lists and plans (`worker/features/*`). What
this module and its parts (`fast_aligned`, `fast_matches`, `fast_context`) re-state is the
per-candidate assembly of `row.candidate_features` and `aligned.aligned_features`, the text
matches and their ranks, the context texts' and lists' features: which name gets which value.
`fast_kinds.FORMAT` names the feature space format that assembly was written for; a space of
another format, or a kind this module does not know (`fast_kinds`), is encoded by the general
encoder (`FastEncoder.general`), as is a row whose state it cannot read (the state's walk:
`state_walk`). tests/decide/test_fast_encode.py holds both to identical matrices and decisions
on the frozen rows of every family and on routerBench's anchor rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from worker.decide.fast_aligned import (
    aligned_of,
    checks_of,
    number_columns,
    place_leaves,
    values_key,
)
from worker.decide.fast_batch import Assembly
from worker.decide.fast_context import FlagColumns, ShapeColumns, TextColumns
from worker.decide.fast_kinds import CROSSED, MATCHES, SINGLE, SPLIT, splits, unsupported
from worker.decide.fast_matches import MatchColumns, place_matches
from worker.decide.state_walk import (
    FlatWalk,
    Layout,
    ToolsInfo,
    at_keys,
    context_leaves,
    context_texts,
    dict_parts,
    flat_context,
    flat_signature,
    flat_sorted,
    parse_json,
    sort_context,
)
from worker.features import aligned as al
from worker.features import context as cx
from worker.features import ids
from worker.features.cells import move_features, walk_features, window_features
from worker.features.kinds import name
from worker.features.plans import plan_features
from worker.features.row import candidate_features
from worker.models.encoding import BLOCKS
from worker.models.feature_space import FeatureSpace

TOOLS_CACHE = 1024  # candidate lists whose names and pieces are kept
LAYOUTS = 1024  # layouts (JSON keys and candidates) kept
ALIGNED = 4096  # aligned parts' contents kept, over all layouts (then all are let go)
COLUMN_AT = 1 << 20  # cells of a call up to which `scaled` looks their columns up (8 MB)
Pairs = dict[str, dict[str, int]]


class FastEncoder:
    """A feature space compiled for decisions. `raw(rows)` and `scaled(rows)` are the general
    encoder's matrices for those rows (stacked: each row's candidates in turn, and each row's
    count). `compiled` is False when the space is encoded by the general encoder throughout
    (`reason` says why). `reads`: the only columns worked out, for a model that reads no others
    (a gbdt's split columns), the rest 0.0 (LightGBM copies a dense row's every cell but 0.0,
    NaN included, before a tree reads it); None: all of them."""

    def __init__(self, space: FeatureSpace, reads: Collection[int] | None = None) -> None:
        self.space = space
        kept = range(len(space.names)) if reads is None else set(reads)
        self.index = {n: j for j, n in enumerate(space.names) if j in kept}
        read = np.isin(np.arange(len(space.names)), list(self.index.values()))
        self._blank = None if reads is None else np.where(read, np.nan, 0.0)
        self.width = len(space.names)
        self._mean = np.asarray(space.mean, dtype=np.float64)
        self._scale = np.asarray(space.scale, dtype=np.float64)
        self._column_at = np.zeros(0, dtype=np.intp)  # flat index -> column (`scaled`)
        self._tools: OrderedDict[tuple[str, ...], ToolsInfo] = OrderedDict()
        self._layouts: OrderedDict[tuple[Any, ...], Layout | None] = OrderedDict()
        self._aligned_kept = 0  # aligned records held by the layouts
        self.match_columns = MatchColumns(self.index)  # a match's own, R, HI, LO columns
        self.reason = unsupported(space)
        self.compiled = self.reason is None
        self.single: dict[str, dict[str, int]] = {k: {} for k in SINGLE}
        self.pairs: dict[str, Pairs] = {k: {} for k in SPLIT}
        self.pos: int | None = self.index.get(name("pos"))
        for feature, column in self.index.items():  # in the columns' order
            prefix, _, body = feature.partition(":")
            if prefix in self.single:
                self.single[prefix][body] = column
            elif prefix in SPLIT:
                # Every split at the separator: the name is `prefix:first<sep>second` for each,
                # so a (first, second) a row spells finds its column exactly.
                for first, second in splits(body, SPLIT[prefix]):
                    self.pairs[prefix].setdefault(first, {})[second] = column
        self.compared_keys = set(self.pairs["D"]) | set(self.pairs["GE"])
        self.set_paths = set(self.pairs["COV"]) | set(self.pairs["IN"])  # set leaves matched
        # An aligned number's kept columns: its own value (`A:`), rank, distance to the max, to
        # the min (None where not kept).
        self.number_columns: dict[str, tuple[int | None, ...]] = {
            path: tuple(self.single[k].get(path) for k in ("A", "R", "HI", "LO"))
            for k in ("A", "R", "HI", "LO")
            for path in self.single[k]
        }
        ranked = [b for k in ("R", "HI", "LO") for b in self.single[k]]
        self.matches = any(n.startswith(MATCHES) for n in self.index) or any(
            b.startswith(MATCHES) for b in ranked
        )
        # Crossed ids (`X:<name>@<id>`): per candidate id, the crossed context names it keeps.
        self.crossed: dict[str, dict[str, int]] = {}
        for inner, by_id in self.pairs["X"].items():
            for low, column in by_id.items():
                self.crossed.setdefault(low, {})[inner] = column
        # Text words a column reads, directly (`W:`) or crossed (`X:W:...`).
        self.words: dict[str, set[str]] = {p: set(w) for p, w in self.pairs["W"].items()}
        for inner in self.pairs["X"]:
            if inner.startswith("W:"):
                for tpath, word in splits(inner[2:], ":"):
                    self.words.setdefault(tpath, set()).add(word)
        # Per text path, each word a candidate may cross: its `W:` name (`context.crossed`: one
        # without a space), read where the space crosses any.
        crossing = {
            tpath: {w: n for w in sorted(words) if " " not in (n := name("W", tpath, w))}
            for tpath, words in self.words.items()
        }
        self.text_columns = TextColumns(
            self.pairs["W"], crossing if self.crossed else {}, self.pairs["TS"]
        )
        self.shape_columns = ShapeColumns(self.index)
        self.flag_columns = FlagColumns(self.index)

    # ---- the matrices ---------------------------------------------------------------------------
    def raw(self, rows: Sequence[tuple[str, Sequence[str]]]) -> tuple[np.ndarray, list[int]]:
        """All candidates of `rows` ((state, tools) pairs) stacked, NaN where a feature is
        absent, and each row's candidate count."""
        counts = [len(t) for _, t in rows]
        into = Assembly(self.width, counts, self._blank)
        start = 0
        for row, (state, tools) in enumerate(rows):
            self.place(state, list(tools), into, (row, start))
            start += counts[row]
        return into.matrix(), counts

    def scaled(self, raw: np.ndarray) -> np.ndarray:
        """`encoding.scaled_matrix` of a stacked raw matrix (elementwise: the same numbers as
        scaling each row's block alone), by flat indices: the present values gathered, scaled
        and scattered with their flags, the rest left 0 (a quarter less time at 64 rows)."""
        width = raw.shape[1]
        values = raw.ravel()
        present = np.flatnonzero(values == values)  # not NaN
        # Each flat index's column, looked up (not divided) up to COLUMN_AT cells.
        if len(self._column_at) < len(values) <= COLUMN_AT:
            self._column_at = np.tile(np.arange(width, dtype=np.intp), raw.shape[0])
        if len(values) <= len(self._column_at):
            columns = self._column_at[present]
        else:
            columns = present % width
        out = np.zeros((raw.shape[0], BLOCKS * width), dtype=np.float32)
        # (row, column) of `raw` goes to (row, column) of `out` (BLOCKS times as wide), its
        # flags `width`, `2 * width` (above 0) and `3 * width` (below) further on.
        place = present + (BLOCKS - 1) * (present - columns)
        flat = out.reshape(-1)
        # `squash` in place (sign * log1p(|x|): the same products), then cast to float32 before
        # the scatter (a scatter that casts took three times as long).
        x = values[present]
        scaled = np.abs(x)
        np.log1p(scaled, out=scaled)
        scaled *= np.sign(x)
        scaled -= self._mean[columns]
        scaled /= self._scale[columns]
        flat[place] = scaled.astype(np.float32)
        flat[place + width] = 1.0
        flat[place[x > 0] + 2 * width] = flat[place[x < 0] + 3 * width] = 1.0
        return out

    def general(self, state: str, tools: list[str]) -> np.ndarray:
        """The general encoder: the space's own `raw`, whatever it reads."""
        return self.space.raw(state, tools)

    def place(self, state_text: str, tools: list[str], into: Assembly, at: tuple[int, int]) -> None:
        """One row's raw matrix handed to `into`, the row at `at` (its place among the call's
        rows, its first candidate's among their candidates)."""
        if not self.compiled:
            into.whole.append((at[1], self.general(state_text, tools)))
            return
        # context.parse_state, with the JSON's own keys kept for the layout cache.
        # A flat state of a known layout is read from its JSON as it is (`FlatWalk`): nested
        # only where the general code must read it (an aligned content not seen, a plan).
        state: Any = None
        layout = None
        try:
            parsed = parse_json(state_text)
        except (TypeError, ValueError):
            state, parsed, signature = {"text": state_text}, None, None
        else:
            signature = flat_signature(parsed)
        if signature is not None:
            layout = self._layout(parsed, (signature, tuple(tools)), tools)
        if layout is None and state is None:
            state = cx.nested(parsed)
        if not self._candidates(state, parsed, tools, into, at, layout):
            into.whole.append((at[1], self.general(state_text, tools)))
            return
        if layout is not None:
            if not layout.walk.may_plan(parsed):
                return
            state = cx.nested(parsed)
        plan = plan_features(state, candidate_features)
        if plan:
            placed = self._columns(plan)
            if placed:
                into.plans.append((at[1], len(tools), placed))

    # ---- one row, as row.candidate_features assembles it ---------------------------------------
    def _candidates(
        self,
        state: Any,
        parsed: Any,
        tools: list[str],
        into: Assembly,
        at: tuple[int, int],
        layout: Layout | None,
    ) -> bool:
        """The row's candidate features into `into` (`at`: as `place`'s); False when this row
        is left to the general encoder (a field looked up under a context string spells an
        aligned path the row already has: rare, and the split below assumes it away; nothing is
        handed over before that is known)."""
        n = len(tools)
        info = self._tools_info(tools)
        names = info.names
        if layout is None:
            known = ids.state_names(state)
            numbered = [
                ids.numbers_outside_names(t, ns & known) for t, ns in zip(tools, names, strict=True)
            ]
            found_parts = al.aligned_parts(state, names)
            concretes = [
                [al.concrete_root(state, path, ns) for path, _ in parts]
                for ns, parts in zip(names, found_parts, strict=True)
            ]
            part = aligned_of(self, found_parts, concretes, info, numbered)
        else:
            numbered = layout.numbered
            content = values_key(parsed, layout.aligned_keys)
            found = layout.aligned.get(content)
            if found is None:
                state = cx.nested(parsed)
                found_parts = [[(g, at_keys(state, keys)) for g, keys in c] for c in layout.parts]
                found = aligned_of(self, found_parts, layout.roots, info, numbered)
                self._aligned_kept += 1
                if self._aligned_kept > ALIGNED:
                    for kept in self._layouts.values():
                        if kept is not None:
                            kept.aligned.clear()
                    self._aligned_kept = 1
                layout.aligned[content] = found
            part = found
        roots = part.roots
        if layout is not None:  # the flat walk's leaves sorted as they are read
            walked = layout.walk.context(roots)
            leaves = flat_sorted(parsed, walked, roots)
        else:
            leaves = sort_context(context_leaves(state, roots))
        ctx_lists, ctx_strings, ctx_sets = leaves.lists, leaves.strings, leaves.sets
        grids, by_value = leaves.grids, leaves.by_value
        ctx_numbers = leaves.numbers[: al.MAX_CONTEXT]
        # Fields keyed by a context string, under its path (`aligned.looked_up`): per row.
        looked = (
            [
                al.looked_up(mine, by_value) if not segments.isdisjoint(by_value) else []
                for mine, segments in zip(part.leaves, part.segments, strict=True)
            ]
            if by_value
            else []
        )
        looked_columns: dict[str, list[float]] = {}
        if any(looked):
            looked_columns = number_columns(looked)
            base = {p for mine in part.leaves for p, _ in mine}
            if any(p in base for mine in looked for p, _ in mine):
                return False
        readings = context_texts(leaves.texts)
        lists = leaves.number_lists

        # The shared context features (the same for every candidate): (name, value) in the
        # general encoder's order, and their columns.
        # The context texts' `W:` and `TS:` columns, and the crossable ones by name.
        shared_cols, crossable = self.text_columns(readings)
        shared: dict[str, float] = {}  # the rest of the shared features, by name
        moves = None  # cells.move_features: a move's cells, per candidate (none without grids)
        if grids:
            shared.update(window_features(grids, lists))
            shared.update(walk_features(grids, lists, ctx_lists, ctx_strings))
            context = (
                flat_context(parsed, walked, roots)
                if layout is not None
                else context_leaves(state, roots)
            )
            strs = [(p, v) for p, v in context if isinstance(v, str | frozenset)]
            moves = move_features(grids, lists, strs, tools)
        shared.update(cx.list_differences(lists))
        if shared:
            shared_cols.update(self._columns(shared))
            crossable.update(
                (k, v) for k, v in shared.items() if k.startswith(CROSSED) and " " not in k
            )

        single, pairs = self.single, self.pairs
        c_col = single["C"]
        d_pairs, ge_pairs = pairs["D"], pairs["GE"]
        c_place = [(c_col[p], float(v)) for p, v in ctx_numbers if p in c_col]
        name_in = single["NAME_IN"]
        places = single["IDX"] or single["IDXE"]  # `context.list_places`' kinds kept
        # The context by path, as the general loops over it leave each name's value: the last
        # number and string of a path, its last non-empty set, every string it has (`EQ:` is
        # set by any of them).
        number_at = dict(ctx_numbers)
        string_at = dict(ctx_strings)
        strings_at: dict[str, set[str]] = {}
        for cpath, cstr in ctx_strings:
            strings_at.setdefault(cpath, set()).add(cstr)
        set_at = {cpath: cset for cpath, cset in ctx_sets if cset}
        # Every candidate's own features: flat indices into the call's matrix (candidate *
        # width + column) and values.
        width = self.width
        first = at[1]
        flat = into.own_flat
        values = into.own_values
        cross_items = list(crossable.items())
        for i in range(n):
            # aligned.aligned_features: what the parts alone give, then what the row adds
            f: dict[int, float] = {}
            own, (covers, within, equal) = part.own[i], part.checks[i]
            if looked and looked[i]:
                own, sets, strings = list(own), list(part.sets[i]), list(part.strings[i])
                place_leaves(
                    self, looked[i], looked_columns, part.numbers[i], f, own, sets, strings
                )
                covers, within, equal = checks_of(self, sets, strings)
            for cpath, j, value in covers:
                cset = set_at.get(cpath)
                if cset is not None:
                    f[j] = len(cset & value) / len(cset)
            for cpath, j, value in within:
                held = string_at.get(cpath)
                if held is not None:
                    f[j] = float(held in value)
            for cpath, j, text in equal:
                if text in strings_at.get(cpath, ()):
                    f[j] = 1.0
            # aligned.compared (below, for the candidates whose own numbers are the part's)
            for key, number in own[: al.MAX_ALIGNED] if looked and looked[i] else ():
                if key not in self.compared_keys:
                    continue
                for cpath, j in d_pairs.get(key, {}).items():
                    if cpath in number_at:
                        f[j] = number - float(number_at[cpath])
                for cpath, j in ge_pairs.get(key, {}).items():
                    if cpath in number_at:
                        f[j] = float(number >= number_at[cpath])
            # aligned.name_in
            if name_in:
                for cpath, cset in ctx_sets:
                    named = name_in.get(cpath)
                    if named is not None and names[i] & cset:
                        f[named] = 1.0
                for cpath, cstr in ctx_strings:
                    named = name_in.get(cpath)
                    if named is not None and cstr in names[i]:
                        f[named] = 1.0
            if ctx_lists and places:
                self.put(cx.list_places(ctx_lists, names[i]), f)
            if moves is not None:
                self.put(moves[i], f)
            row_at = (first + i) * width
            if n <= cx.MAX_CROSSED_CANDIDATES and crossable:
                crossed = self.crossed.get(info.lows[i])
                if crossed:  # `X:` columns: no other kind writes them; a row's few words
                    for word, count in cross_items:
                        if (column := crossed.get(word)) is not None:
                            flat.append(row_at + column)
                            values.append(count)
            flat += map(row_at.__add__, f)
            values += f.values()
        # The context's numbers and strings (`C:`, `CS:`), shared features and list shapes, the
        # same for every candidate (no candidate's own kind: written first); then the parts'
        # own, the comparisons, the id ranks and the text matches' ranks, as `Assembly` does.
        common = dict(c_place)
        common.update(self.flag_columns(ctx_strings, ctx_sets, grids))
        common.update(shared_cols)
        if layout is not None:
            common.update(self.shape_columns(leaves.shapes))
        else:
            common.update(self._columns(cx.list_shapes(state, roots)))
        if common:
            into.context(at[0], common)
        into.fixed.append((first, part.fixed))
        skip = [i for i, mine in enumerate(looked) if mine]
        into.compare(first, part.compared, [number_at.get(p) for p in part.compared.context], skip)
        into.ranks.append((first, part.id_ranks))
        if self.matches:
            place_matches(
                self.match_columns, part.matchers, part.names, readings, into.matches, first
            )
        return True

    # ---- helpers --------------------------------------------------------------------------------
    def _columns(self, features: dict[str, float]) -> dict[int, float]:
        out: dict[int, float] = {}
        self.put(features, out)
        return out

    def put(self, features: dict[str, float], f: dict[int, float]) -> None:
        get = self.index.get
        for feature, value in features.items():
            j = get(feature)
            if j is not None:
                f[j] = value

    def _layout(self, parsed: Any, key: tuple[Any, ...], tools: list[str]) -> Layout | None:
        """The layout of rows with these JSON keys and candidates (a flat state's), worked out
        by the general code on the first such row and checked there; None when it cannot be
        kept (the row is then read in full)."""
        if key in self._layouts:
            self._layouts.move_to_end(key)
            return self._layouts[key]
        names = self._tools_info(tools).names
        state = cx.nested(parsed)
        known = ids.state_names(state)
        numbered = [
            ids.numbers_outside_names(t, ns & known) for t, ns in zip(tools, names, strict=True)
        ]
        general = al.aligned_parts(state, names)
        parts = dict_parts(state, names)
        same = [[(g, id(s)) for g, s in c] for c in general] == [
            [(g, id(at_keys(state, keys))) for g, keys in c] for c in parts
        ]
        layout = None
        if same:
            roots = [
                [al.concrete_root(state, g, ns) for g, _ in c]
                for ns, c in zip(names, general, strict=True)
            ]
            wanted = [".".join(keys) for c in parts for _, keys in c]
            aligned_keys = tuple(
                k for k in key[0] if any(k == w or k.startswith(f"{w}.") for w in wanted)
            )
            layout = Layout(numbered, parts, roots, aligned_keys, FlatWalk.of(parsed))
        self._layouts[key] = layout
        if len(self._layouts) > LAYOUTS:
            self._layouts.popitem(last=False)
        return layout

    def _tools_info(self, tools: list[str]) -> ToolsInfo:
        key = tuple(tools)
        info = self._tools.get(key)
        if info is None:
            info = self._tools[key] = ToolsInfo(key)
            if len(self._tools) > TOOLS_CACHE:
                self._tools.popitem(last=False)
        else:
            self._tools.move_to_end(key)
        return info
