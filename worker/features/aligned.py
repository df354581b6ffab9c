"""The parts of the state about a candidate (SPEC §6): parts keyed by one of its names
(`routes.TRM_ONLY.*`, `assets.GLOW.*`, `busy.oven`), or list items whose `name`/`id` is one.
Their leaves are the candidate's own fields, under a path with the matched key as `*`, so another
world's spelling of the same field lines up (`A:routes.*.cost`).

Per candidate: `A:<a>` an aligned number (a field keyed by a context string is also under that
string's path: with `request.intent = "code"`, `routes.*.cap.code` is also
`routes.*.cap.[request.intent]`, the cap that applies) with `R:`, `HI:`, `LO:` (its rank among the
candidates, its distance to their max and min); `D:<a>|<c>` and `GE:<a>|<c>` (an aligned or id
number less a context number, and whether it is at least it: a rule's edge, `t >= release`, as a
flag, which a neural model does not stretch past the values it trained on); `LEN:`, `IN:`, `COV:`
(an aligned list: its length, a context string in it, the share of a context list in it); `EQ:`
(equal strings); `NAME_IN:` (a name of the candidate in a context list, or a context string);
`AT:`/`RUN:` (an aligned line of cells read at the candidate's id numbers, `cells.py`).
"""

from __future__ import annotations

from typing import Any

from worker.features.cells import cells_at, is_cells
from worker.features.kinds import Features, name
from worker.features.values import Value

MAX_CONTEXT = 48  # context numbers a row's comparisons use (the first, in key order)
MAX_ALIGNED = 24  # aligned numbers per candidate that are compared with the context


def aligned_parts(state: Any, names: list[set[str]]) -> list[list[tuple[str, Any]]]:
    """Per candidate (`names`: each one's names), (path with the matched key as `*`, the
    sub-object) for the parts of the state about it. One walk serves every candidate: a
    candidate leaves a branch where a key or an item's `name`/`id` is one of its names."""
    found: list[list[tuple[str, Any]]] = [[] for _ in names]

    def walk(node: Any, path: str, active: list[int]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                low, rest = str(key).lower(), []
                for c in active:
                    if low in names[c]:
                        found[c].append((f"{path}.*" if path else "*", value))
                    else:
                        rest.append(c)
                if rest:
                    walk(value, f"{path}.{key}" if path else str(key), rest)
        elif isinstance(node, list):
            for i, value in enumerate(node[:64]):
                tag = value.get("name", value.get("id")) if isinstance(value, dict) else None
                rest = active
                if isinstance(tag, str):
                    low, rest = tag.lower(), []
                    for c in active:
                        if low in names[c]:
                            found[c].append((f"{path}.*", value))
                        else:
                            rest.append(c)
                if rest:
                    walk(value, f"{path}.{i}", rest)

    walk(state, "", list(range(len(names))))
    return found


def concrete_root(state: Any, generic: str, names: set[str]) -> str | None:
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
                    (
                        i
                        for i, v in enumerate(node)
                        if isinstance(v, dict) and str(v.get("name", v.get("id"))).lower() in names
                    ),
                    None,
                )
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


def looked_up(mine: list[tuple[str, Value]], by_value: dict[str, str]) -> list[tuple[str, Value]]:
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


def aligned_features(
    mine: list[tuple[str, Value]],
    columns: dict[str, list[float]],
    ids: list[int],
    context: list[tuple[str, Value]],
    f: Features,
) -> list[tuple[str, float]]:
    """The candidate's aligned leaves (`mine`) against the row (`columns`: each aligned number's
    values over the candidates) and the context, into `f`. Its numbers, to compare with the
    context's."""
    ctx_strings = [(p, v) for p, v in context if isinstance(v, str)]
    ctx_sets = [(p, v) for p, v in context if isinstance(v, frozenset)]
    own: list[tuple[str, float]] = []
    for path, value in mine:
        if isinstance(value, float):
            key = name("A", path)
            f[key] = value
            column = columns[path]
            f[name("R", path)] = sum(v < value for v in column) / len(column)
            f[name("HI", path)] = value - max(column)
            f[name("LO", path)] = value - min(column)
            own.append((key, value))
        elif isinstance(value, frozenset):
            f[name("LEN", path)] = float(len(value))
            for cpath, cset in ctx_sets:
                if cset:
                    f[name("COV", path, cpath)] = len(cset & value) / len(cset)
            for cpath, cstr in ctx_strings:
                f[name("IN", path, cpath)] = float(cstr in value)
        elif isinstance(value, str):
            for cpath, cstr in ctx_strings:
                if cstr == value:
                    f[name("EQ", path, cpath)] = 1.0
            if is_cells(value):
                own += cells_at(value, path, ids, f)
    return own


def compared(own: list[tuple[str, float]], numbers: list[tuple[str, float]], f: Features) -> None:
    """`D:` and `GE:` of the candidate's numbers (the first `MAX_ALIGNED`) against the context's."""
    for key, value in own[:MAX_ALIGNED]:
        for cpath, cvalue in numbers:
            f[name("D", key, cpath)] = value - float(cvalue)
            f[name("GE", key, cpath)] = float(value >= cvalue)


def name_in(context: list[tuple[str, Value]], names: set[str], f: Features) -> None:
    """`NAME_IN:` a name of the candidate is in a context list or equals a context string."""
    for cpath, value in context:
        if isinstance(value, frozenset) and names & value:
            f[name("NAME_IN", cpath)] = 1.0
    for cpath, value in context:
        if isinstance(value, str) and value in names:
            f[name("NAME_IN", cpath)] = 1.0


def ranks(numbers: list[Features], out: list[Features]) -> None:
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
