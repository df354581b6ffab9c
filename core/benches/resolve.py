"""What a bench compares, resolved from names to files (SPEC §7). Light: json and paths only, so
the API answers `POST /benches/{name}?dry_run=true` with it without starting a worker.

`baseline` / `router` each name one of:
- `none`: an untrained controller (trm benches: the default trm config at a fixed seed, with the
  vocabulary of the bench corpus) or the bare base model (`trainer: qlora` benches);
- a train run id (a ULID; anything else is refused): `RUNS_DIR/<id>/` must be `completed` (its
  summary.json); the model files in its `trainer/` folder say what it trained (trm, gbdt or
  qlora); the corpus knobs of its corpus manifest shape the anchors;
- `<hill-climb run id>:root` / `:final`: `RUNS_DIR/<id>/summary.json`'s `search` (what a
  finished hill-climb writes there, worker/kinds/hillclimb.py) keys `root_candidate_run` (its
  first candidate) and `best_run` (its best) name the train run; they must be run ids, and a
  chain of them is cut at MAX_REF_DEPTH or at the first run seen twice (a refusal, not a loop);
- every file read back lies inside its run's folder once symlinks are resolved;
- an artifact path under RUNS_DIR or DATA_DIR: a folder with `model.safetensors` (trm),
  `model.txt` (gbdt) or `adapter_config.json` (a qlora adapter; `adapter/` inside is looked into).

`router` alone may be `train` (routerbench's default, and what the skill's `router_model: ""`
means): the bench run trains a trm controller first, on the bench data's train worlds (the
anchors held out, the bench's corpus knobs), with `router_train` (else the bench's default, else
the trm defaults), into its own `trainer/` folder, and benches that (`train` in the resolved
router side is the train spec it runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.benches.menu import external_data, load_entry
from core.paths import confined, data_dir_hint, is_run_id, outside_message, under
from core.play_files import TRACE_FILE, reasoning_trace_source
from core.rundir import (
    ADAPTER,
    ADAPTER_CONFIG,
    CORPUS,
    GBDT_MODEL,
    MANIFEST,
    RUN_META,
    SUMMARY,
    TRAINER,
    TRM_CONFIG,
    TRM_MODEL,
)
from core.schemas.puzzles import GRID_FORMAT
from core.schemas.train import TrmTrainerConfig

# A whole-answer puzzle model answers grids, not (state, tools) decisions: no bench, no promotion.
PUZZLE_MODEL = (
    "run {run} trained trm_grid, a whole-answer puzzle model: it answers puzzles, not (state, "
    "tools) decisions, so it cannot be benched or promoted as a controller; its scorecard.json "
    "holds its scores on the held-out puzzles, against the one-step model"
)
TRAIN_HERE = "train"  # the router side trained inside the bench run
# The knobs that change how a row reads: a trained side's anchors are shaped with its own.
SHAPE_KNOBS = ("state_compression", "state_keys", "namespace_normalization", "namespace_map")


class ResolveError(Exception):
    def __init__(self, failure_class: str, reason: str) -> None:
        super().__init__(reason)
        self.failure_class, self.reason = failure_class, reason


# A hill-climb's :final names a train run, never another pick; a chain longer than this is a
# loop or a forgery.
MAX_REF_DEPTH = 4


def _read_json(path: Path, root: Path) -> dict[str, Any]:
    """A JSON object from a file that must resolve inside `root` (symlinks followed), else {}."""
    if not under(root, path):
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_side(
    ref: str,
    side: str,
    runs_dir: Path,
    data_dir: Path,
    trainer: str,
    model_cache: Path,
    seen: tuple[str, ...] = (),
) -> dict[str, Any]:
    """{"ref", "policy" (a load_policy reference, or a placeholder for `none`), "knobs", ...}.

    Run ids are checked as run ids and their folders are `RUNS_DIR/<id>`; what a run's files say
    never names a folder outside that run's own."""
    if ref == "none":
        if trainer == "qlora":
            return {"ref": ref, "policy": {"type": "base_lm", "model_cache": str(model_cache)}}
        return {"ref": ref, "policy": {"type": "untrained_trm", "seed": 0}}
    run_id, colon, pick = ref.partition(":")
    if colon or is_run_id(run_id):
        if not (is_run_id(run_id) and pick in ("", "root", "final")):
            raise ResolveError(
                "bad_input",
                f"{side}: {ref!r} is not a run reference (<run id>, <run id>:root or "
                "<run id>:final)",
            )
        if run_id in seen or len(seen) >= MAX_REF_DEPTH:
            chain = " -> ".join([*seen, run_id])
            raise ResolveError(
                "bad_input", f"{side}: {ref!r} leads to a loop of run references ({chain})"
            )
        run_dir = Path(runs_dir) / run_id
        if not run_dir.is_dir() or not under(Path(runs_dir), run_dir):
            raise ResolveError("bad_input", f"{side}: no run {run_id}")
        if pick:
            key = {"root": "root_candidate_run", "final": "best_run"}[pick]
            target = search_pick(_read_json(run_dir / SUMMARY, run_dir), key)
            if not target:
                raise ResolveError(
                    "bad_input",
                    f"{side}: {ref!r}: run {run_id} has no search.{key} in its summary.json "
                    "(use <hill-climb run>:root or :final on a finished hill-climb)",
                )
            if not is_run_id(target):
                raise ResolveError(
                    "bad_input", f"{side}: {ref!r}: run {run_id}'s {key} is not a run id"
                )
            chosen = resolve_side(
                target, side, runs_dir, data_dir, trainer, model_cache, (*seen, run_id)
            )
            return {**chosen, "ref": ref}
        return _from_run(ref, side, run_dir, model_cache)
    path = Path(ref)
    if not path.is_absolute():
        path = Path(data_dir) / path
    path = path.resolve()
    if not (under(Path(runs_dir), path) or under(Path(data_dir), path)):
        raise ResolveError(
            "bad_input",
            f"{side}: {ref!r} is neither none, a run id, nor a path under the runs "
            "or data directory",
        )
    return {"ref": ref, "policy": _artifact(path, side, ref, model_cache), "knobs": None}


def search_pick(summary: dict[str, Any], key: str) -> Any:
    """`best_run` or `root_candidate_run` of a hill-climb's summary.json: under its `search`."""
    search = summary.get("search")
    return search.get(key) if isinstance(search, dict) else None


def trainer_of(out: Path) -> str | None:
    """What a train run trained, from the model files in its `trainer/` folder (never from a
    config file a client could have written); `trm_grid` is a whole-answer puzzle model, whose
    config.json says so."""
    if (out / TRM_MODEL).is_file():
        return (
            "trm_grid" if _read_json(out / TRM_CONFIG, out).get("format") == GRID_FORMAT else "trm"
        )
    if (out / GBDT_MODEL).is_file():
        return "gbdt"
    if (out / ADAPTER / ADAPTER_CONFIG).is_file():
        return "qlora"
    return None


def _from_run(ref: str, side: str, run_dir: Path, model_cache: Path) -> dict[str, Any]:
    """A completed train run's model. Its folders are the run directory's own (`trainer/`,
    `corpus/`), never paths read from a file in it."""
    summary = _read_json(run_dir / SUMMARY, run_dir)
    status = summary.get("status", "not finished")
    if status != "completed" or summary.get("dry_run"):
        raise ResolveError(
            "bad_input",
            f"{side}: run {ref} is {'a dry run' if summary.get('dry_run') else status}, not a "
            "completed train run; bench a completed one",
        )
    out = run_dir / TRAINER
    trainer = trainer_of(out) if under(run_dir, out) else None
    if trainer is None:
        raise ResolveError(
            "bad_input",
            f"{side}: run {ref} holds no model in {TRAINER}/ ({TRM_MODEL}, {GBDT_MODEL} or "
            f"{ADAPTER}/{ADAPTER_CONFIG}); bench a completed train run",
        )
    if trainer == "trm_grid":
        raise ResolveError("bad_input", f"{side}: {PUZZLE_MODEL.format(run=ref)}")
    policy: dict[str, Any]
    if trainer in ("trm", "gbdt"):
        policy = {"type": trainer, "path": str(out)}
    else:
        contract = _read_json(out / RUN_META, run_dir).get("contract")
        policy = {
            "type": "qlora",
            "path": str(out / ADAPTER),
            "contract": contract if contract in ("action_only", "json") else "action_only",
            "model_cache": str(model_cache),
        }
    manifest = _read_json(run_dir / CORPUS / MANIFEST, run_dir)
    knobs = {k: v for k, v in (manifest.get("knobs") or {}).items() if k in SHAPE_KNOBS}
    return {"ref": ref, "run_id": run_dir.name, "policy": policy, "knobs": knobs}


def _artifact(path: Path, side: str, ref: str, model_cache: Path) -> dict[str, Any]:
    if (path / TRM_MODEL).is_file():
        return {"type": "trm", "path": str(path)}
    if (path / GBDT_MODEL).is_file():
        return {"type": "gbdt", "path": str(path)}
    for folder in (path, path / ADAPTER):
        if (folder / ADAPTER_CONFIG).is_file():
            meta = _read_json(folder.parent / RUN_META, folder.parent)
            return {
                "type": "qlora",
                "path": str(folder),
                "contract": meta.get("contract", "action_only"),
                "model_cache": str(model_cache),
            }
    raise ResolveError(
        "dependency",
        f"{side}: {path} holds no model ({TRM_MODEL} for trm, {GBDT_MODEL} for gbdt, "
        f"{ADAPTER_CONFIG} for a qlora adapter); put the artifact there or name a completed run",
    )


def data_source(entry: dict[str, Any], data_dir: Path, results_jsonl: str | None) -> dict:
    """The corpus source the bench's anchors are read from."""
    name = entry["name"]
    export = results_jsonl or entry.get("results_jsonl")
    if export:
        path = confined(export, Path(data_dir))
        if path is None:
            outside = outside_message(export, "TRM_DATA_DIR") + data_dir_hint(Path(data_dir))
            raise ResolveError("bad_input", f"results_jsonl: {outside}")
        return {"type": "jsonl", "mode": "normalized", "name": name, "path": str(path)}
    root = Path(data_dir) / "benches" / name
    if (entry.get("corpus") or {}).get("source") == "reasoning_trace":
        return reasoning_trace_source(name, str(root / TRACE_FILE))
    return {"type": "trm_play_root", "name": name, "path": str(root)}


def trained_here(
    entry: dict[str, Any], spec: dict[str, Any], source: dict[str, Any], run_dir: Path | None
) -> dict[str, Any]:
    """The router side of `router: train`: the train spec the bench run runs first (a `train`
    run's corpus and trm config), and the model it will leave in the run's `trainer/`."""
    knobs = (entry.get("corpus") or {}).get("knobs") or {}
    sizes = spec.get("router_train") or entry["defaults"].get("router_train") or {}
    train = {
        "kind": "train",
        "trainer": "trm",
        "trm": TrmTrainerConfig.model_validate(sizes).model_dump(mode="json"),
        "corpus": {
            "sources": [source],
            "split": {"by": "env", "seed": 0, "anchor": entry.get("anchor_worlds") or []},
            "knobs": knobs,
            "contract": "action_only",
        },
        "seed": int(spec.get("seed") or 0),
    }
    path = str(run_dir / TRAINER) if run_dir is not None else f"<this run>/{TRAINER}"
    return {
        "ref": TRAIN_HERE,
        "policy": {"type": "trm", "path": path},
        "knobs": knobs,
        "train": train,
    }


def resolve_bench(
    spec: dict[str, Any],
    runs_dir: Path,
    data_dir: Path,
    model_cache: Path,
    run_dir: Path | None = None,
) -> dict[str, Any]:
    """The bench spec (BenchSpec as JSON) resolved: data, anchors, both sides, repeats.
    `run_dir`: the bench run's own folder, where a `router: train` side's model lies."""
    try:
        entry = load_entry(spec["bench"])
    except KeyError as exc:
        raise ResolveError("bad_input", f"bench: {exc.args[0]}") from None
    defaults = entry["defaults"]
    if entry.get("external"):
        return resolve_external(entry, spec, runs_dir, data_dir, model_cache)
    trainer = spec.get("trainer") or defaults["trainer"]
    source = data_source(entry, data_dir, spec.get("results_jsonl"))
    sides: dict[str, dict[str, Any]] = {}
    for side in ("baseline", "router"):
        ref = spec.get(side) or defaults[side]
        if ref == TRAIN_HERE and side == "router":
            sides[side] = trained_here(entry, spec, source, run_dir)
        elif ref == TRAIN_HERE:
            raise ResolveError(
                "bad_input",
                f"{side}: {TRAIN_HERE!r} is for the router only (the baseline is "
                "none, a run id, RUN:root|final, or an artifact path)",
            )
        else:
            sides[side] = resolve_side(ref, side, runs_dir, data_dir, trainer, model_cache)
    # `none` reads rows shaped like the trained side's (its corpus knobs), else the bench's.
    knobs = (
        sides["router"].get("knobs")
        or sides["baseline"].get("knobs")
        or (entry.get("corpus") or {}).get("knobs")
        or {}
    )
    for chosen in sides.values():
        if chosen.get("knobs") is None:
            chosen["knobs"] = knobs
    return {
        "bench": entry["name"],
        "description": entry.get("description"),
        "source": source,
        "generated": source["type"] != "jsonl" or source.get("mode") == "reasoning_trace",
        "anchor_worlds": entry.get("anchor_worlds"),
        "split": {"by": "env", "seed": 0, "anchor": entry.get("anchor_worlds") or []},
        "trainer": trainer,
        "baseline": sides["baseline"],
        "router": sides["router"],
        "repeats": int(spec.get("repeats") or defaults["repeats"]),
        "episodes": int(spec.get("episodes") or defaults["episodes"]),
        "train_sample": int(spec.get("train_sample") or defaults["train_sample"]),
        "seed": int(spec.get("seed") or 0),
    }


def resolve_external(
    entry: dict[str, Any], spec: dict[str, Any], runs_dir: Path, data_dir: Path, model_cache: Path
) -> dict[str, Any]:
    """An external bench (a published data set): its data folder under DATA_DIR, which must be
    there (nothing is downloaded), or none where the data comes from an installed package (the
    worker says what to install when it is missing), a trained router, and a baseline that is
    one of the data set's own or another trained model."""
    name, defaults = entry["name"], entry["defaults"]
    data = external_data(entry, spec.get("data"))
    path = None if data is None else confined(data, Path(data_dir))
    if data is not None and path is None:
        outside = outside_message(data, "TRM_DATA_DIR") + data_dir_hint(Path(data_dir))
        raise ResolveError("bad_input", f"data: {outside}")
    if path is not None and not path.is_dir():
        raise ResolveError(
            "dependency",
            f"bench {name}: no data at {path}; {entry.get('install') or 'put the data set there'}",
        )
    instances = spec.get("instances") or defaults.get("instances")
    if spec.get("instances") and "instances" not in defaults:
        raise ResolveError("bad_input", f"instances: bench {name} has no instances to choose")
    router = spec.get("router") or defaults["router"]
    if router in ("none", TRAIN_HERE):
        raise ResolveError(
            "bad_input",
            f"router: bench {name} scores a trained router; name one (a completed train run id, "
            f"trained on a {entry['external']} corpus)",
        )
    baselines = list(entry.get("baselines") or [])
    sides: dict[str, dict[str, Any]] = {}
    baseline = spec.get("baseline") or defaults["baseline"]
    for side, ref in (("router", router), ("baseline", baseline)):
        if side == "baseline" and ref in (*baselines, "none"):
            chosen = ref if ref != "none" else defaults["baseline"]
            sides[side] = {"ref": chosen, "baseline": chosen}
            continue
        sides[side] = resolve_side(ref, side, runs_dir, data_dir, "trm", model_cache)
        if sides[side]["policy"]["type"] not in ("trm", "gbdt", "qlora"):
            raise ResolveError("bad_input", f"{side}: {ref!r} is not a trained model")
    return {
        "bench": name,
        "external": entry["external"],
        "description": entry.get("description"),
        "data": None if path is None else str(path),
        "package": entry.get("package") if path is None else None,
        "instances": instances,
        "anchor_worlds": entry.get("anchor_worlds"),
        "baselines": baselines,
        "baseline": sides["baseline"],
        "router": sides["router"],
        "repeats": int(spec.get("repeats") or defaults["repeats"]),
        "seed": int(spec.get("seed") or 0),
    }
