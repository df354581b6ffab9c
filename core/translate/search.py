"""Translate the original skill's search specs (`hillclimb-spec*.json`, `routerbench-spec.json`)
into our `hillclimb` spec (SPEC §3.3, §8). We have no copy of those files: their shape is inferred
from the skill's text, and reasonable variants of each key are accepted.

What changes meaning:
- `mutations` (a {knob: values} object, or a list of {knob|name, values|choices}) become knob
  ranges: the six data knobs go to `knobs`, trainer settings (`lr`, `epochs`, ...) to
  `trainer_knobs`;
- the ladder's levels become our rungs: their names must be the six rungs in order; a level that
  says what it does (`heldout_breadth`, `state_compression`, `split_by`) replaces that rung;
- `max_generalization_gap` is now a hard ceiling of the keep rule, not only a report;
- the base trainer spec and the corpus spec are read (relative paths against the file) and the
  corpus spec is translated by `core.translate.corpus`; output folders and evaluator commands are
  ignored (a candidate is a `train` run with its own `evaluate` stage).
A `routerbench-spec.json` without search keys becomes a `bench` run of our `routerbench`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.schemas.hillclimb import RUNG_NAMES
from core.translate.common import Translation
from core.translate.reader import Reader

DATA_KNOBS = {
    "source_mix": "source_mix",
    "heldout_breadth": "heldout_breadth",
    "held_out_breadth": "heldout_breadth",
    "state_compression": "state_compression",
    "negative_rate": "negative_rate",
    "negative_example_rate": "negative_rate",
    "recovery_rate": "recovery_rate",
    "recovery_example_rate": "recovery_rate",
    "namespace_normalization": "namespace_normalization",
    "action_namespace_normalization": "namespace_normalization",
}
TRAINER_KNOBS = {
    "lr": "lr",
    "learning_rate": "lr",
    "epochs": "epochs",
    "num_epochs": "epochs",
    "hidden": "hidden",
    "hidden_size": "hidden",
    "n_recursions": "n_recursions",
    "recursions": "n_recursions",
    "batch_size": "batch_size",
    "r": "r",
    "lora_r": "r",
    "alpha": "alpha",
    "lora_alpha": "alpha",
}
SCALARS = {
    "name": "name",
    "run_name": "name",
    "search_name": "name",
    "seed": "seed",
    "max_candidates": "max_candidates",
    "max_iterations": "max_candidates",
    "iterations": "max_candidates",
    "patience": "patience",
    "plateau_patience": "patience",
    "noise_margin": "noise_margin",
    "min_improvement": "noise_margin",
    "max_generalization_gap": "max_generalization_gap",
    "max_gap": "max_generalization_gap",
    "gap_ceiling": "max_generalization_gap",
    "parallelism": "parallelism",
    "max_parallel": "parallelism",
    "workers": "parallelism",
    "start_level": "start_rung",
    "start_rung": "start_rung",
    "ladder_start": "start_rung",
}
ANCHOR_KEYS = ("anchors", "anchor_envs", "anchor_worlds", "anchor_set", "anchor_groups")
BASE_KEYS = (
    "base",
    "base_spec",
    "base_config",
    "trainer_spec",
    "train_spec",
    "router_training_spec",
)
CORPUS_KEYS = ("corpus_spec", "corpus")
IGNORED = {
    "output_root": "a search writes under its run directory",
    "output_dir": "a search writes under its run directory",
    "run_root": "a search writes under its run directory",
    "run_id": "the service names runs",
    "template_root": "our routerBench data is generated under DATA_DIR/benches",
    "evaluator": "each candidate is scored by its train run's evaluate stage",
    "evaluator_command": "each candidate is scored by its train run's evaluate stage",
    "eval_command": "each candidate is scored by its train run's evaluate stage",
    "no_eval": "each candidate is scored by its train run's evaluate stage",
    "python": "the worker runs the trainers itself",
    "hermes": "the worker runs the trainers itself",
}
SEARCH_MARKERS = {"mutations", "ladder", "ladder_levels", "generalization_ladder", "search_space"}
ROUTERBENCH_ANCHORS = ["route-s1000-w8", "route-s1000-w9"]
ROUTERBENCH_SOURCE = {"type": "trm_play_root", "name": "routerbench", "path": "benches/routerbench"}


def looks_like_skill_search_spec(data: Any) -> bool:
    if not isinstance(data, dict) or "kind" in data:
        return False
    keys = set(data) | set(data.get("search") or {} if isinstance(data.get("search"), dict) else ())
    return bool(SEARCH_MARKERS & keys) or "max_generalization_gap" in keys


def looks_like_skill_routerbench_spec(data: Any) -> bool:
    if not isinstance(data, dict) or "kind" in data:
        return False
    named = str(data.get("bench") or data.get("name") or data.get("bench_name") or "").lower()
    named = named.replace("-", "").replace("_", "")
    if "primehub" in named:  # the PrimeHub bench specs share keys such as template_root
        return False
    return "routerbench" in named or "template_root" in data


def _mutations(raw: Any, reader: Reader) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(data knob ranges, trainer knob ranges) from the skill's `mutations`."""
    pairs: list[tuple[str, Any, str]] = []
    if isinstance(raw, dict):
        pairs = [(str(k), v, f"mutations.{k}") for k, v in raw.items()]
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                reader.warnings.append(f"mutations[{i}]: ignored (not an object)")
                continue
            name = item.get("knob") or item.get("name") or item.get("key")
            values = next((item[k] for k in ("values", "choices", "range") if k in item), None)
            pairs.append((str(name), values, f"mutations[{i}]"))
    else:
        reader.errors.append("mutations: expected an object or a list")
    knobs: dict[str, list[Any]] = {}
    trainer: dict[str, list[Any]] = {}
    for name, values, where in pairs:
        if not isinstance(values, list):
            reader.warnings.append(f"{where}: ignored (values are not a list: {values!r})")
        elif name in DATA_KNOBS:
            knobs[DATA_KNOBS[name]] = values
        elif name in TRAINER_KNOBS:
            trainer[TRAINER_KNOBS[name]] = values
            reader.warnings.append(
                f"{where}: trainer knob {TRAINER_KNOBS[name]!r} turned by the search "
                "(trainer_knobs); ours turns data knobs only unless asked"
            )
        else:
            reader.warnings.append(f"{where}: ignored (no knob {name!r} in our search)")
    return knobs, trainer


def _ladder(raw: Any, reader: Reader, out: dict[str, Any]) -> None:
    if isinstance(raw, dict):
        if "start" in raw:
            out["start_rung"] = raw["start"]
        raw = raw.get("levels") or raw.get("rungs") or []
    if not isinstance(raw, list):
        reader.errors.append("ladder: expected a list of levels")
        return
    names: list[str] = []
    rungs: list[dict[str, Any]] = []
    for i, level in enumerate(raw):
        item = level if isinstance(level, dict) else {"name": level}
        name = str(item.get("name") or item.get("level") or item.get("id") or "")
        names.append(name)
        rung = {"name": name}
        for key in ("split_by", "heldout_breadth", "state_compression", "namespace_normalization"):
            if key in item:
                rung[key] = item[key]
        extra = sorted(set(item) - {"name", "level", "id", "description", *rung})
        for key in extra:
            reader.warnings.append(f"ladder[{i}].{key}: ignored")
        rungs.append(rung)
    unknown = [n for n in names if n and n not in RUNG_NAMES and not n.isdigit()]
    if unknown:
        reader.warnings.append(
            f"ladder: level names {', '.join(unknown)} are not ours; rungs are "
            f"{', '.join(RUNG_NAMES)} (matched by position)"
        )
    if len(rungs) != len(RUNG_NAMES):
        reader.warnings.append(
            f"ladder: {len(rungs)} levels; ours has 6 rungs, so the default ladder is used"
        )
        return
    if all({"heldout_breadth", "state_compression"} <= set(r) for r in rungs):
        out["ladder"] = [{**r, "name": RUNG_NAMES[i]} for i, r in enumerate(rungs)]
    else:
        reader.warnings.append(
            "ladder: levels do not say their heldout_breadth and state_compression; "
            "the default ladder's rungs are used"
        )


def translate_search_spec(
    data: dict[str, Any],
    base_dir: Path,
    default_corpus: dict[str, Any] | None = None,
    root: Path | None = None,
) -> Translation:
    """(our hillclimb spec, warnings, errors) for the skill's `hillclimb-spec*.json`."""
    reader = Reader(base_dir, root)
    flat = dict(data)
    if isinstance(flat.get("search"), dict):
        flat.update(flat.pop("search"))
    out: dict[str, Any] = {"kind": "hillclimb"}
    base: dict[str, Any] | None = None
    corpus: dict[str, Any] | None = None
    for key, value in flat.items():
        if key in SCALARS:
            out[SCALARS[key]] = value
        elif key in ANCHOR_KEYS:
            anchors = value.get("envs") or value.get("worlds") if isinstance(value, dict) else value
            if isinstance(anchors, list) and all(isinstance(a, str) for a in anchors):
                out["anchors"] = anchors
            else:
                reader.errors.append(f"{key}: expected a list of env or group names")
        elif key == "mutations" or key == "search_space":
            out["knobs"], trainer = _mutations(value, reader)
            if trainer:
                out["trainer_knobs"] = trainer
        elif key in ("ladder", "ladder_levels", "generalization_ladder"):
            _ladder(value, reader, out)
        elif key in BASE_KEYS:
            base, _ = reader.json_at(value, key)
        elif key in CORPUS_KEYS:
            corpus = reader.corpus(value, key)
        elif key == "trainer":
            out.setdefault("_trainer", value)
        elif key in IGNORED:
            reader.warnings.append(f"{key}: ignored ({IGNORED[key]})")
        else:
            reader.warnings.append(f"{key}: ignored (no counterpart in our hillclimb spec)")
    out["base"] = _base(base, corpus or default_corpus, out.pop("_trainer", None), reader)
    if "max_generalization_gap" in out:
        reader.warnings.append(
            "max_generalization_gap: now a hard ceiling: a candidate over it is never kept"
        )
    return out, reader.warnings, reader.errors


def _base(
    base: dict[str, Any] | None, corpus: dict[str, Any] | None, trainer: Any, reader: Reader
) -> dict[str, Any]:
    """Our train spec from the skill's base trainer spec and/or corpus spec."""
    out: dict[str, Any] = {"kind": "train", "trainer": "trm"}
    if base is not None:
        if base.get("kind") == "train" or "corpus" in base and isinstance(base["corpus"], dict):
            out.update({k: v for k, v in base.items() if k != "kind"})
            if isinstance(out.get("corpus"), dict) and corpus is None:
                corpus = reader.corpus(out["corpus"], "base.corpus")
        else:
            for key, value in base.items():
                if key in ("corpus_spec", "corpus") and corpus is None:
                    corpus = reader.corpus(value, f"base.{key}")
                elif key in TRAINER_KNOBS:
                    section = out.setdefault("trm", {})
                    section[TRAINER_KNOBS[key]] = value
                    reader.warnings.append(f"base.{key}: now trm.{TRAINER_KNOBS[key]}")
                else:
                    reader.warnings.append(f"base.{key}: ignored (no counterpart in a train spec)")
    if trainer in ("trm", "qlora"):
        out["trainer"] = trainer
    elif trainer is not None:
        reader.warnings.append(f"trainer: {trainer!r} is not ours (trm, qlora); using trm")
    if corpus is None:
        reader.errors.append(
            "no corpus: name the corpus spec (corpus_spec) or a base train spec (base)"
        )
    else:
        out["corpus"] = corpus
    return out


def translate_routerbench_spec(
    data: dict[str, Any], base_dir: Path, root: Path | None = None
) -> Translation:
    """A routerBench spec with search keys is a search over our routerBench data; without, a
    `bench` run of our `routerbench`."""
    if looks_like_skill_search_spec(data):
        flat = dict(data)
        for key in ("bench", "bench_name"):
            flat.pop(key, None)
        if not any(k in flat for k in ANCHOR_KEYS):
            flat["anchors"] = list(ROUTERBENCH_ANCHORS)
        default = {"sources": [dict(ROUTERBENCH_SOURCE)], "split": {"by": "env"}}
        search, warnings, errors = translate_search_spec(
            flat, base_dir, default_corpus=default, root=root
        )
        warnings.insert(0, "routerBench search: our routerbench data under DATA_DIR/benches")
        return search, warnings, errors
    reader = Reader(base_dir, root)
    out: dict[str, Any] = {"kind": "bench", "bench": "routerbench"}
    for key, value in data.items():
        if key in ("bench", "bench_name"):
            continue
        if key in ("name", "run_name"):
            out["name"] = value
        elif key in ("baseline", "router") and isinstance(value, str):
            out[key] = value
        elif key in ("dry_run",):
            out[key] = bool(value)
        elif key in IGNORED:
            reader.warnings.append(f"{key}: ignored ({IGNORED[key]})")
        elif key in CORPUS_KEYS and isinstance(value, str):
            reader.path(value, key)
            reader.warnings.append(f"{key}: ignored (the bench's anchors are fixed by the bench)")
        else:
            reader.warnings.append(f"{key}: ignored (no counterpart in our bench spec)")
    return out, reader.warnings, reader.errors
