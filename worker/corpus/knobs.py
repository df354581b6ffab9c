"""The six data knobs (SPEC §4, §8), each deterministic in the split seed and reported.

Knobs that choose rows (`source_mix`, `recovery_rate`, `negative_rate`) act on train-group rows
only: val and anchor stay what the split made them, so scores stay comparable across candidates.
Knobs that change how a row reads (`state_compression`, `namespace_normalization`) act on every
exported row, so a model is evaluated on the form it was trained on. `heldout_breadth` is applied
by the split (split.py). Rows are chosen by sha256(seed, row digest), never by file position, and
rows are only ever dropped, never duplicated or made up.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from worker.corpus.rows import Row
from worker.corpus.sources import compact_json

# Trace extras dropped by `keys` when `state_keys` is empty: scores and diagnostics, not decisions.
TRACE_EXTRAS = frozenset(
    {"latent", "latent_norm", "metrics", "rationale", "reasoning", "debug", "notes", "trace"}
)
_FLOAT_DIGITS = 2


def _rank(seed: int, row: Row) -> bytes:
    return hashlib.sha256(f"{seed}:{row.digest}".encode()).digest()[:8]


def take(rows: list[Row], count: int, seed: int) -> list[Row]:
    """`count` rows chosen by hash rank, kept in their original order."""
    if count >= len(rows):
        return rows
    chosen = {id(row) for row in sorted(rows, key=lambda row: _rank(seed, row))[: max(count, 0)]}
    return [row for row in rows if id(row) in chosen]


def apply_source_mix(
    rows: list[Row], mix: dict[str, float], seed: int
) -> tuple[list[Row], dict[str, Any]]:
    """Downsample so each source's share of train follows its weight (as far as rows allow)."""
    if not mix:
        return rows, {}
    by_source: dict[str, list[Row]] = {}
    for row in rows:
        by_source.setdefault(row.source, []).append(row)
    active = {name: weight for name, weight in mix.items() if weight > 0 and by_source.get(name)}
    total_weight = sum(active.values())
    # The largest train size at which every active source can supply its share.
    total = min((len(by_source[name]) * total_weight / w for name, w in active.items()), default=0)
    keep: dict[str, int] = {}
    for name in mix:
        weight = active.get(name, 0.0)
        available = len(by_source.get(name, []))
        keep[name] = (
            min(available, math.floor(total * weight / total_weight + 1e-9)) if weight else 0
        )
    chosen = {id(row) for name in keep for row in take(by_source.get(name, []), keep[name], seed)}
    effect = {
        name: {"weight": mix[name], "available": len(by_source.get(name, [])), "kept": keep[name]}
        for name in mix
    }
    return [row for row in rows if id(row) in chosen], effect


def apply_recovery_rate(
    rows: list[Row], rate: float | None, seed: int
) -> tuple[list[Row], dict[str, Any]]:
    """Downsample recovery or other rows so recovery rows make up `rate` of train."""
    recovery = [row for row in rows if row.recovery]
    other = [row for row in rows if not row.recovery]
    effect: dict[str, Any] = {
        "requested": rate,
        "available_recovery": len(recovery),
        "available_other": len(other),
    }
    if rate is not None and rows:
        if rate >= 1.0:
            other = []
        elif recovery and len(recovery) / len(rows) > rate:
            recovery = take(recovery, math.floor(rate * len(other) / (1 - rate) + 1e-9), seed)
        elif recovery and rate > 0:
            other = take(other, math.floor(len(recovery) * (1 - rate) / rate + 1e-9), seed)
        elif not recovery and rate > 0:
            effect["note"] = "no recovery rows to reach the requested share; nothing dropped"
        kept = {id(row) for row in recovery} | {id(row) for row in other}
        rows = [row for row in rows if id(row) in kept]
    effect["kept_recovery"] = sum(1 for row in rows if row.recovery)
    effect["kept_other"] = len(rows) - effect["kept_recovery"]
    effect["achieved"] = round(effect["kept_recovery"] / len(rows), 4) if rows else None
    return rows, effect


def apply_negative_rate(
    negatives: list[Row], train_rows: int, rate: float | None, seed: int
) -> tuple[list[Row], dict[str, Any]]:
    """Keep negatives (train groups) numbering `rate` x the train rows; None keeps all."""
    count = len(negatives) if rate is None else min(len(negatives), round(rate * train_rows))
    kept = take(negatives, count, seed)
    return kept, {"requested": rate, "available": len(negatives), "kept": len(kept)}


def _flatten(obj: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, f"{path}.", out)
        else:
            out[path] = value


def _is_identifier(path: str) -> bool:
    last = path.rsplit(".", 1)[-1]
    return last == "id" or last.endswith("_id")


def _coarse(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, _FLOAT_DIGITS)
    if isinstance(value, list):
        return [_coarse(item) for item in value]
    return value


def compress_state(text: str, obj: Any, level: str, keys: list[str]) -> str | None:
    """The state text at a compression level; None when the state is not a JSON object.

    full: unchanged. keys: only `keys` (top-level) if given, else all but TRACE_EXTRAS.
    minimal: keys, then nested objects flattened to dotted leaves, identifier leaves (`id`,
    `*_id`) dropped and floats rounded to 2 digits: the least there is to memorize.
    """
    if level == "full":
        return text
    if obj is None and text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
    if not isinstance(obj, dict):
        return None
    if keys:
        kept = {key: obj[key] for key in keys if key in obj}
    else:
        kept = {key: value for key, value in obj.items() if key not in TRACE_EXTRAS}
    if level == "minimal":
        flat: dict[str, Any] = {}
        _flatten(kept, "", flat)
        kept = {path: _coarse(v) for path, v in flat.items() if not _is_identifier(path)}
    return compact_json(kept)


def namespace_tag(
    raw: str, env: str, mapping: dict[str, str], world_tags: dict[str, str] | None = None
) -> str:
    """Shared tag for an env-specific action id: the explicit mapping; else, with `world_tags`
    (the `auto` knob), the world's own tag for it, or the id as it is; else the id without its env
    prefix (`grid-w3.north`) and namespace (`nav:north`, `grid/north`)."""
    if raw in mapping:
        return mapping[raw]
    if world_tags is not None:
        return world_tags.get(raw, raw)
    tag = raw
    for sep in (".", ":", "/", "_", "-"):
        prefix = f"{env}{sep}"
        if env and tag.startswith(prefix) and len(tag) > len(prefix):
            tag = tag[len(prefix) :]
            break
    cut = max(tag.rfind(":"), tag.rfind("/"))
    if 0 <= cut < len(tag) - 1:
        tag = tag[cut + 1 :]
    return tag


def normalize_namespace(
    tools: list[str],
    action: str,
    env: str,
    mapping: dict[str, str],
    world_tags: dict[str, str] | None = None,
) -> tuple[list[str], str] | None:
    """(tags, action tag), or None when two tools of the row would share a tag. `world_tags`:
    the `auto` knob's tags of the row's world."""
    tags = [namespace_tag(tool, env, mapping, world_tags) for tool in tools]
    if len(set(tags)) != len(tags):
        return None
    return tags, tags[tools.index(action)]
