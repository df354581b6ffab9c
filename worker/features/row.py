"""One row read whole (SPEC §6, "the input encoding aligns each candidate with the parts of the
state about it, keeps list order and treats numbers as numbers"): every way of reading a state
joined into one dict of named numbers per candidate. Shared by the `gbdt` reference and the
`trm`; `FeatureSpace` (worker/models/feature_space.py) chooses which names a model reads.

Generic: no family is named in this package. The readings, one module each: the candidate's own
id (`ids.py`), the parts of the state about it (`aligned.py`), the rest of the state, the same for
every candidate (`context.py`), lines of cells and grids (`cells.py`), text (`text.py`), a plan
read step by step (`plans.py`). Every name is spelled by `kinds.py`'s table, which `explain()`
reads back.
"""

from __future__ import annotations

from typing import Any

from worker.features import aligned as al
from worker.features import context as cx
from worker.features import ids
from worker.features import text as tx
from worker.features.cells import Grid, move_features, walk_features, window_features
from worker.features.kinds import Features, name
from worker.features.plans import plan_features
from worker.features.text import Text
from worker.features.values import Value


def row_features(state_text: str, tools: list[str]) -> list[Features]:
    """One dict of named numbers per candidate of the row: the candidate set against the state
    and, where the state holds a plan, the plan read step by step (`plans.py`)."""
    state = cx.parse_state(state_text)
    out = candidate_features(state, tools)
    plan = plan_features(state, candidate_features)
    for features in out:
        features.update(plan)
    return out


def candidate_features(state: Any, tools: list[str]) -> list[Features]:
    """One dict of features per candidate of the row (a parsed state)."""
    n = len(tools)
    names = [ids.names_of(t) for t in tools]
    known = ids.state_names(state)
    numbered = [
        ids.numbers_outside_names(t, ns & known) for t, ns in zip(tools, names, strict=True)
    ]
    aligned: list[list[tuple[str, Value]]] = []
    bags: list[dict[str, frozenset[str]]] = []
    roots: set[str] = set()
    for tool_names, parts in zip(names, al.aligned_parts(state, names), strict=True):
        mine: list[tuple[str, Value]] = []
        bags.append(tx.aligned_bags(parts))
        for path, sub in parts:
            concrete = al.concrete_root(state, path, tool_names)
            if concrete:
                roots.add(concrete)
            if isinstance(sub, dict | list):
                mine += [(f"{path}.{p}" if p else path, v) for p, v in cx.leaves(sub)]
            else:
                mine += [(path, v) for _, v in cx.leaves(sub)]
        aligned.append(mine)
    context = cx.context_leaves(state, roots)
    ctx_numbers = [(p, v) for p, v in context if isinstance(v, float)][: al.MAX_CONTEXT]
    ctx_lists = [(p, v) for p, v in context if isinstance(v, tuple)]
    by_value: dict[str, str] = {}  # a context string -> its path (the first with that value)
    for cpath, value in context:
        if isinstance(value, str):
            by_value.setdefault(value, cpath)
    for mine in aligned:
        mine += al.looked_up(mine, by_value)
    readings = tx.context_texts((p, v) for p, v in context if isinstance(v, Text))
    matches = tx.match_features(readings, bags, tools)
    lists = cx.number_lists(context)
    shared = tx.context_features(readings)
    grids = [(p, v) for p, v in context if isinstance(v, Grid)]
    strings = [(p, v) for p, v in context if isinstance(v, str)]
    shared.update(window_features(grids, lists))
    shared.update(walk_features(grids, lists, ctx_lists, strings))
    moves = move_features(
        grids, lists, [(p, v) for p, v in context if isinstance(v, str | frozenset)], tools
    )
    shared.update(cx.list_differences(lists))
    sets = [(p, v) for p, v in context if isinstance(v, frozenset)]
    flags = cx.string_flags(strings, sets, {p for p, _ in grids})

    # Per aligned number, its values over the row's candidates (for ranks and distances).
    columns: dict[str, list[float]] = {}
    for mine in aligned:
        for path, value in mine:
            if isinstance(value, float):
                columns.setdefault(path, []).append(value)

    out: list[Features] = []
    for i, tool in enumerate(tools):
        f = ids.id_features(tool, i, n, numbered[i])
        numbers = ids.id_numbers(numbered[i])
        own = [(name("N", k), float(v)) for k, v in enumerate(numbers)]
        own += al.aligned_features(aligned[i], columns, numbers, context, f)
        al.compared(own, ctx_numbers, f)
        for cpath, cvalue in ctx_numbers:
            f[name("C", cpath)] = float(cvalue)
        f.update(flags)
        al.name_in(context, names[i], f)
        f.update(cx.list_places(ctx_lists, names[i]))
        f.update(matches[i])
        f.update(moves[i])
        f.update(shared)
        if n <= cx.MAX_CROSSED_CANDIDATES:
            f.update(cx.crossed(shared, tool))
        out.append(f)
    al.ranks(matches, out)
    ids.id_number_ranks(numbered, out)
    shapes = cx.list_shapes(state, roots)
    for f in out:
        f.update(shapes)
    return out
