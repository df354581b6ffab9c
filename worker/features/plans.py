"""A plan in the state, read step by step (SPEC §6): what a verifier needs to judge a proposed
solution without the world that would replay it.

A **plan** is a list of action names beside a dict that spells each of them as an action id (the
verify observation's `proposal` and `tags`: `"cpu0:3"` -> `"place:cpu0@t3"`). Its **items** are
the state's list of objects whose length is closest to the plan's (`requests`, `jobs`): step i
is set against item i, as an agent would have taken it. Its **scope** is the object holding that
list (`instance`), or the state when there is none.

Each step is encoded as a one-candidate row by `row.candidate_features` (passed in: the row
reads the plan, not the plan the row): the scope with the item list
replaced by item i, so the step's own fields (`routes.*.ms`, the line of cells `busy.*` read at
its slot, the numbers of its id) meet the item's (`latency_budget_ms`, `release`, `dur`), with the
differences of the item's own numbers as extra ones (`deadline-dur`: the latest start). Per step
feature over the steps: `PMIN:` and `PMAX:` its least and greatest value, `PALL:` the share of
steps that have it (a flag such as `NAME_IN` true on every step). Per aligned number: `PSUM:` the
plan's total, and `PD:` that total less each number of the scope (`budget`). And `PLEN`: the
plan's length less its items' (a dropped step). Per object of a dict keyed by the plan's actions
(`assets.*`), what the plan does to it in sum (`_tallies`: buys less sells against target less
held; and, whatever its verbs, how many steps name it less how far apart two of its numbers are,
`GAP:TALLY:*|held-target`, 0 on every object when each is moved exactly as far as it should be:
a plan that only sells has no buy count to subtract, so this is what reads it), over every
object as `OMIN:`/`OMAX:`. The same for every candidate of the row: a
verdict is read against them. Names keep their paths, so a model learns one source family's
rules from that family's worlds, and a world without a plan has none of these features.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.features.context import leaves
from worker.features.ids import names_of
from worker.features.kinds import KINDS, Features, name, start

MAX_STEPS = 16  # steps of a plan that are encoded (the rest only count in PLEN)
MAX_ITEM_NUMBERS = 8  # numbers of an item whose pairwise differences are added
# What a one-candidate row says about its step (the table's `step` kinds); ranks among
# candidates, positions and context copies say nothing there.
STEP_KINDS = tuple(start(k.prefix) for k in KINDS if k.step)
FLAGS = tuple(start(k.prefix) for k in KINDS if k.step and k.value == "flag")  # counted
ALIGNED = start("A")

Encoder = Callable[[Any, list[str]], list[Features]]
ANY_VERB = name("TALLY", "*")  # the steps naming an object with any verb (`GAP:`)


def plan_features(state: Any, candidate_features: Encoder) -> Features:
    """The row's plan features (empty when the state holds no plan)."""
    found = _plan(state)
    if found is None:
        return {}
    steps, scope, items_key = found
    items = scope[items_key] if items_key is not None else None
    out: Features = {}
    if items is not None:
        out[name("PLEN")] = float(len(steps) - len(items))
    values: dict[str, list[float]] = {}
    encoded = steps[:MAX_STEPS]
    step_names = [names_of(action) for action in encoded]
    for i, (action, own) in enumerate(zip(encoded, step_names, strict=True)):
        step_state = dict(scope)
        if items is not None and items_key is not None:
            if i >= len(items):
                continue
            step_state[items_key] = _with_differences(items[i])
        (features,) = candidate_features(_without_others(step_state, own), [action])
        for feature, value in features.items():
            if feature.startswith(STEP_KINDS):
                values.setdefault(feature, []).append(value)
    for feature, seen in values.items():
        if feature.startswith(FLAGS):
            out[name("PALL", feature)] = len(seen) / len(encoded)
        else:
            out[name("PMIN", feature)] = min(seen)
            out[name("PMAX", feature)] = max(seen)
    names: set[str] = set().union(*step_names)
    totals = {n[len(ALIGNED) :]: sum(v) for n, v in values.items() if n.startswith(ALIGNED)}
    outside = _without_others({k: v for k, v in scope.items() if k != items_key}, names)
    for path, number in leaves(outside):
        if isinstance(number, float) and not names & set(path.lower().split(".")):
            for field, total in totals.items():
                out[name("PD", name("PSUM", field), path)] = total - number
    for field, total in totals.items():
        out[name("PSUM", field)] = total
    out.update(_tallies(scope, step_names, names))
    return out


def _tallies(scope: dict[str, Any], step_names: list[set[str]], names: set[str]) -> Features:
    """Per object of a dict keyed by the plan's actions (`assets.DUNE` for `sell:DUNE`), every
    object of it, named or not: how many steps name it, by the rest of their names (`TALLY:sell`),
    their differences (`TALLY:buy-sell`), and each less and plus the object's own numbers and
    their differences (`S:TALLY:buy-sell|held-target` is 0 when the plan ends at the target,
    `D:TALLY:sell|held` above 0 when it sells what is not held), and the steps that name it at
    all less the distance between two of its numbers (`GAP:TALLY:*|held-target`). Over the objects:
    `OMIN:`/`OMAX:`. What a plan does to each object in sum, where a step alone says little."""
    out: Features = {}
    for path, objects in _keyed_dicts(scope, names):
        keys = {str(k).lower() for k in objects}
        verbs = sorted({v for v in names if ":" not in v and "." not in v} - keys)
        values: dict[str, list[float]] = {}
        for key, obj in objects.items():
            mine = [own for own in step_names if str(key).lower() in own]
            tally = {v: float(sum(v in own for own in mine)) for v in verbs}
            tally.update(_differences(list(tally.items())))
            listed = _numbers(obj)
            pairs = _differences(listed[:MAX_ITEM_NUMBERS])
            numbers = {**dict(listed), **pairs}
            for field, apart in pairs.items():
                gap = name("GAP", ANY_VERB, field)
                values.setdefault(gap, []).append(len(mine) - abs(apart))
            for t, count in tally.items():
                counted = name("TALLY", t)
                values.setdefault(counted, []).append(count)
                for field, number in numbers.items():
                    values.setdefault(name("D", counted, field), []).append(count - number)
                    values.setdefault(name("S", counted, field), []).append(count + number)
        for feature, seen in values.items():
            out[name("OMIN", path, feature)] = min(seen)
            out[name("OMAX", path, feature)] = max(seen)
    return out


def _keyed_dicts(node: Any, names: set[str], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(path, dict) for every dict of objects some of whose keys the plan's steps name."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        objects = {k: v for k, v in node.items() if isinstance(v, dict)}
        keyed = any(str(k).lower() in names for k in objects)
        if keyed:
            out.append((path, objects))
        for key, value in node.items():
            if not (keyed and key in objects):
                out += _keyed_dicts(value, names, f"{path}.{key}" if path else str(key))
    return out


def _plan(state: Any) -> tuple[list[str], dict[str, Any], str | None] | None:
    """(the plan's steps as action ids, its scope, the key of its items in the scope)."""
    found = _find_plan(state)
    if found is None:
        return None
    holder, plan_key, tags, spent = found
    steps = [str(tags[name]) for name in holder[plan_key]]
    rest = {k: v for k, v in holder.items() if k != plan_key and k not in spent}
    best: tuple[int, dict[str, Any], str] | None = None
    for scope, key, items in _object_lists(rest):
        gap = abs(len(items) - len(steps))
        if best is None or gap < best[0]:
            best = (gap, scope, key)
    if best is None:
        return steps, rest, None
    return steps, best[1], best[2]


def _find_plan(node: Any) -> tuple[dict[str, Any], str, dict[str, Any], set[str]] | None:
    """(the dict holding a plan, the plan's key, the names' spellings, the keys that hold
    them): a dict beside the plan, or that dict flattened to dotted keys beside it (`tags.a`,
    `tags.b` for `["a", "b"]`: a state `context.nested` leaves flat, one that holds an object
    beside its dotted keys; a `minimal` state is read back nested before it gets here)."""
    if not isinstance(node, dict):
        return None
    for key, value in node.items():
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            for tags_key, tags in node.items():
                spelled = _spellings(tags, value)
                if spelled is not None:
                    return node, str(key), spelled, {str(tags_key)}
            flat = _flat_tags(node, str(key), value)
            if flat is not None:
                prefix, spelled = flat
                return node, str(key), spelled, {f"{prefix}.{n}" for n in spelled}
    for value in node.values():
        if (found := _find_plan(value)) is not None:
            return found
    return None


def _spellings(tags: Any, plan: list[str]) -> dict[str, Any] | None:
    """Each name's spelling where `tags` is a dict of strings alone that spells every name of
    the plan: by the name as a key, or by a dotted name's parts as the keys down to it (a
    `minimal` state read back nested spells `T1.cpu2` as `{"T1": {"cpu2": ...}}`); else None."""
    if not isinstance(tags, dict):
        return None
    spelled: dict[str, Any] = {}
    for item in plan:
        node: Any = tags.get(item)
        if node is None:
            node = tags
            for part in item.split("."):
                node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, str):
            return None
        spelled[item] = node
    # Checked last: the names' lookups turn most dicts down before the whole dict is walked.
    return spelled if _strings_alone(tags) else None


def _strings_alone(node: dict[str, Any]) -> bool:
    return all(
        isinstance(v, str) or (isinstance(v, dict) and v and _strings_alone(v))
        for v in node.values()
    )


def _flat_tags(
    node: dict[str, Any], plan_key: str, plan: list[str]
) -> tuple[str, dict[str, Any]] | None:
    """(the prefix, each name's spelling) where dotted keys of `node` with one prefix, beside
    the plan's key (`state.tags` by `state.proposal`), spell every name of the plan
    (`state.tags.T1.cpu2` for `T1.cpu2`) and hold strings alone, as the dict they were
    flattened from would; else None."""
    parent = plan_key.rpartition(".")[0]
    first = "." + plan[0]
    for key in node:
        text = str(key)
        if not text.endswith(first) or not isinstance(node[key], str):
            continue
        prefix = text[: -len(first)]
        if not prefix or prefix == plan_key or prefix.rpartition(".")[0] != parent:
            continue
        under = prefix + "."
        spelled = {n: node.get(under + n) for n in plan}
        held = [v for k, v in node.items() if str(k).startswith(under)]
        if all(isinstance(v, str) for v in (*spelled.values(), *held)):
            return prefix, spelled
    return None


def _object_lists(node: Any) -> list[tuple[dict[str, Any], str, list[Any]]]:
    """(the dict holding it, its key, the list) for every non-empty list of objects."""
    out: list[tuple[dict[str, Any], str, list[Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                out.append((node, str(key), value))
            else:
                out += _object_lists(value)
    return out


def _with_differences(item: Any) -> Any:
    """The item with the pairwise differences of its own numbers, in key order (`deadline-dur`,
    however the item orders its keys)."""
    if not isinstance(item, dict):
        return item
    return {**item, **_differences(_numbers(item)[:MAX_ITEM_NUMBERS])}


def _numbers(obj: dict[str, Any]) -> list[tuple[str, float]]:
    """(key, value) of an object's own numbers (not its flags), in key order."""
    own = sorted(obj.items())
    return [(k, float(v)) for k, v in own if isinstance(v, int | float) and not isinstance(v, bool)]


def _differences(numbers: list[tuple[str, float]]) -> dict[str, float]:
    """`a-b`: each number less each later one."""
    return {f"{a}-{b}": x - y for i, (a, x) in enumerate(numbers) for b, y in numbers[i + 1 :]}


def _without_others(node: Any, names: set[str]) -> Any:
    """The state without the parts about other actions than the step's (`routes.LLM_DIRECT`
    beside the step's `routes.TRM_ONLY`): they are not the step's context, and read as such
    they would only name the world's actions."""
    if isinstance(node, dict):
        if any(str(k).lower() in names for k in node):
            return {
                k: v
                for k, v in node.items()
                if str(k).lower() in names or not isinstance(v, dict | list)
            }
        return {k: _without_others(v, names) for k, v in node.items()}
    if isinstance(node, list):
        tags = [v.get("name", v.get("id")) if isinstance(v, dict) else None for v in node]
        if any(isinstance(t, str) and t.lower() in names for t in tags):
            pairs = zip(node, tags, strict=True)
            return [v for v, t in pairs if not isinstance(t, str) or t.lower() in names]
        return [_without_others(v, names) for v in node]
    return node
