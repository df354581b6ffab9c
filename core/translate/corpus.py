"""Translate the original skill's corpus spec (pure-trm-trainer) into our `CorpusSpec` JSON.

Their spec: `{"sources": [{type, name?, path, mode?, state_fields?, ...}], "dedupe": true,
"train_ratio": 0.9, "shuffle_seed": 7, "output_dir": "C:/projects/..."}`. What changes meaning:
- `train_ratio` becomes `split.val_fraction = 1 - train_ratio`, and the random *row* split becomes
  a *group* split (env, run or episode by SPEC §4's rule) unless `split.by: row` is asked for;
- `shuffle_seed` becomes `split.seed`: it now picks the held-out groups, not a row shuffle;
- `output_dir` is ignored: a run writes its corpus under its own run directory (`--out` for
  `trm corpus build`);
- a source's `weight` becomes `knobs.source_mix`.
Relative paths resolve against the file's folder and come out absolute; a path that does not exist
(their Windows defaults such as `C:/projects/...`) is an error, one per path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.translate.common import Translation, existing_path

_SOURCE_KEYS = {
    "trm_play_root": {"type", "name", "path", "pick_base", "run"},
    "jsonl": {
        "type",
        "name",
        "path",
        "mode",
        "state_fields",
        "tools_field",
        "tools_default",
        "action_field",
        "action_default",
        "meta_fields",
    },
    "router_jsonl": {"type", "name", "path", "routes"},
}
_SPLIT_LEVELS = ("env", "run", "episode", "row")
_CARRIED = ("dedupe", "min_exact_positives", "contract")
_SKILL_ONLY_KEYS = {"train_ratio", "shuffle_seed", "output_dir"}


def looks_like_skill_corpus_spec(data: Any) -> bool:
    """The skill's corpus spec: `sources[]` plus its own keys, and none of ours."""
    if not isinstance(data, dict) or not isinstance(data.get("sources"), list):
        return False
    if "kind" in data or "split" in data and isinstance(data["split"], dict) or "knobs" in data:
        return False
    if {"base_model", "lora_r", "trainer"} & set(data):  # a training spec that embeds sources
        return False
    return bool(_SKILL_ONLY_KEYS & set(data)) or "dedupe" in data


def _resolve(
    raw: Any, base_dir: Path, where: str, errors: list[str], root: Path | None
) -> str | None:
    path, error = existing_path(raw, base_dir, where, root)
    if error:
        errors.append(error)
    return str(path.resolve()) if path is not None else None


def _source(
    index: int,
    raw: Any,
    base_dir: Path,
    mix: dict[str, float],
    warnings: list[str],
    root: Path | None,
) -> tuple[dict[str, Any] | None, list[str]]:
    where = f"sources[{index}]"
    errors: list[str] = []
    if not isinstance(raw, dict):
        return None, [f"{where}: not an object"]
    kind = raw.get("type")
    if kind not in _SOURCE_KEYS:
        known = ", ".join(sorted(_SOURCE_KEYS))
        return None, [f"{where}.type: {kind!r} is not a source type we read ({known})"]
    out: dict[str, Any] = {"type": kind}
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        name = f"{kind}_{index}"
        warnings.append(f"{where}.name: missing; named it {name!r}")
    out["name"] = name
    path = _resolve(raw.get("path"), base_dir, f"{where}.path", errors, root)
    if path is not None:
        out["path"] = path
    for key, value in raw.items():
        if key in ("type", "name", "path"):
            continue
        if key == "weight":
            if isinstance(value, int | float) and not isinstance(value, bool):
                mix[name] = float(value)
                warnings.append(f"{where}.weight: now knobs.source_mix[{name!r}] = {value}")
            else:
                warnings.append(f"{where}.weight: ignored (not a number: {value!r})")
        elif key in _SOURCE_KEYS[kind]:
            out[key] = value
        else:
            warnings.append(f"{where}.{key}: ignored (no such field for {kind} sources)")
    return out, errors


def translate_corpus_spec(
    data: dict[str, Any], base_dir: Path, *, split_by: str | None = None, root: Path | None = None
) -> Translation:
    """(our CorpusSpec as a dict, warnings, errors) for the skill's corpus spec `data`."""
    warnings: list[str] = []
    errors: list[str] = []
    mix: dict[str, float] = {}
    sources: list[dict[str, Any]] = []
    for index, raw in enumerate(data.get("sources") or []):
        source, source_errors = _source(index, raw, base_dir, mix, warnings, root)
        errors.extend(source_errors)
        if source is not None:
            sources.append(source)
    if not data.get("sources"):
        errors.append("sources: empty (a corpus needs at least one source)")

    split: dict[str, Any] = {}
    asked = split_by or data.get("split_by")
    if asked is not None and asked not in _SPLIT_LEVELS:
        errors.append(f"split_by: {asked!r} is not one of {', '.join(_SPLIT_LEVELS)}")
        asked = None
    if asked:
        split["by"] = asked
    if "train_ratio" in data:
        ratio = data["train_ratio"]
        if isinstance(ratio, int | float) and 0 < ratio <= 1:
            split["val_fraction"] = round(1 - float(ratio), 10)
            change = (
                "a random row split"
                if asked == "row"
                else "a group split (env/run/episode, SPEC §4), no longer a random row split; "
                "pass --split-by row to keep rows"
            )
            warnings.append(
                f"train_ratio: {ratio} became split.val_fraction={split['val_fraction']}, "
                f"as {change}"
            )
        else:
            errors.append(f"train_ratio: {ratio!r} is not a number in (0, 1]")
    elif asked != "row":
        warnings.append("split: groups (env/run/episode) are held out, not random rows")
    if "shuffle_seed" in data:
        seed = data["shuffle_seed"]
        if isinstance(seed, int) and not isinstance(seed, bool):
            split["seed"] = seed
            warnings.append(
                f"shuffle_seed: now split.seed={seed}; it picks the held-out groups, "
                "not a row shuffle"
            )
        else:
            errors.append(f"shuffle_seed: {seed!r} is not an integer")
    if "output_dir" in data:
        warnings.append(
            f"output_dir: ignored ({data['output_dir']!r}); a run writes its corpus under its "
            "run directory, `trm corpus build` under --out"
        )

    out: dict[str, Any] = {"sources": sources}
    if split:
        out["split"] = split
    for key in _CARRIED:
        if key in data:
            out[key] = data[key]
    if mix:
        out["knobs"] = {"source_mix": {s["name"]: mix.get(s["name"], 1.0) for s in sources}}
        unweighted = [s["name"] for s in sources if s["name"] not in mix]
        if unweighted:
            warnings.append(f"knobs.source_mix: weight 1.0 for {', '.join(unweighted)}")
    handled = {"sources", "train_ratio", "shuffle_seed", "output_dir", "split_by", *_CARRIED}
    for key in sorted(set(data) - handled):
        warnings.append(f"{key}: ignored (no counterpart in our corpus spec)")
    return out, warnings, errors
