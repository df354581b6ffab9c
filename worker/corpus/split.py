"""Group splits (SPEC §4): rows move between splits only as whole groups.

Group keys nest: `env` ⊃ `env/run` ⊃ `env/run/episode` ⊃ `env/run/episode/<row digest>`, so a group
never straddles two envs. `split.by` unset picks `env` when the non-anchor rows span 3+ envs, else
`run` when they span 3+ runs, else `episode`.

Anchors are named by env or by group key; every row under an anchor name is held out entirely. An
anchor finer than the split level (an episode while splitting by env) would cut a group in two, so
it is refused. Val groups are the first groups ordered by sha256(f"{seed}:{group}"): fixed for a
seed, and adding a group does not reshuffle the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from worker.corpus.errors import CorpusInputError
from worker.corpus.rows import Row

LEVELS = ("env", "run", "episode", "row")
SPLITS = ("train", "val", "anchor")
_MIN_GROUPS_FOR_DEFAULT = 3


def group_keys(row: Row) -> tuple[str, str, str, str]:
    run = f"{row.env}/{row.run}"
    episode = f"{run}/{row.episode}"
    return row.env, run, episode, f"{episode}/{row.digest[:16]}"


def group_key(row: Row, level: str) -> str:
    return group_keys(row)[LEVELS.index(level)]


def default_level(rows: Iterable[Row]) -> tuple[str, str]:
    """(level, why) for a spec that leaves `split.by` unset."""
    envs: set[str] = set()
    runs: set[tuple[str, str]] = set()
    for row in rows:
        envs.add(row.env)
        runs.add((row.env, row.run))
    if len(envs) >= _MIN_GROUPS_FOR_DEFAULT:
        return "env", f"default: {len(envs)} envs (3+)"
    if len(runs) >= _MIN_GROUPS_FOR_DEFAULT:
        return "run", f"default: {len(envs)} env(s), {len(runs)} runs (3+)"
    return "episode", f"default: {len(envs)} env(s), {len(runs)} run(s)"


@dataclass
class AnchorMatch:
    is_anchor: list[bool]
    # anchor name -> (level it matched at, rows)
    matched: dict[str, tuple[str, int]]
    missing: list[str]


def match_anchors(rows: list[Row], names: list[str]) -> AnchorMatch:
    wanted = set(names)
    flags = [False] * len(rows)
    matched: dict[str, tuple[str, int]] = {}
    if wanted:
        for i, row in enumerate(rows):
            for level, key in zip(LEVELS[:3], group_keys(row)[:3], strict=True):
                if key in wanted:
                    flags[i] = True
                    _, count = matched.get(key, (level, 0))
                    matched[key] = (level, count + 1)
    missing = [name for name in names if name not in matched]
    return AnchorMatch(flags, matched, missing)


def check_anchor_levels(match: AnchorMatch, level: str) -> None:
    too_fine = sorted(
        name
        for name, (matched_level, _) in match.matched.items()
        if LEVELS.index(matched_level) > LEVELS.index(level)
    )
    if too_fine:
        raise CorpusInputError(
            "split.anchor",
            f"{', '.join(too_fine)} name groups finer than split.by={level}; name anchors at "
            f"the {level} level or coarser, or split by a finer level",
        )


def _order(seed: int, group: str) -> bytes:
    return hashlib.sha256(f"{seed}:{group}".encode()).digest()


def choose_val(
    groups: Iterable[str], seed: int, val_fraction: float, heldout_breadth: int
) -> tuple[set[str], str]:
    """(val groups, how their number was chosen); train keeps at least one group."""
    ordered = sorted(set(groups), key=lambda group: _order(seed, group))
    n = len(ordered)
    if heldout_breadth:
        count = min(heldout_breadth, max(n - 1, 0))
        why = f"heldout_breadth={heldout_breadth}"
    else:
        count = round(val_fraction * n)
        if val_fraction > 0 and n >= 2:
            count = max(count, 1)
        count = min(count, max(n - 1, 0))
        why = f"val_fraction={val_fraction}"
    return set(ordered[:count]), f"{why}: {count} of {n} groups"


def overlaps(groups_by_split: dict[str, set[str]]) -> dict[str, list[str]]:
    """Groups found in two splits, per pair of splits (empty lists prove disjointness)."""
    names = list(groups_by_split)
    found: dict[str, list[str]] = {}
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            found[f"{first}&{second}"] = sorted(groups_by_split[first] & groups_by_split[second])
    return found
