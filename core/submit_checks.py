"""What can be known at submit about what a run will read: its data files exist, the runs a bench
names exist, a bench has something to compare. A 422 naming the field now instead of a 202 that
fails after its turn in the queue.

Runs after `resolve_api_paths`, so every path here is already under DATA_DIR: a path outside it
got the one refusal that does not say whether it exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from core.benches.menu import bench_names, external_data, load_entry
from core.benches.resolve import PUZZLE_MODEL, TRAIN_HERE
from core.db import get_engine
from core.errors import ApiError
from core.models import Controller, Run
from core.paths import BENCH_REF, confine, spec_path_fields
from core.schemas.puzzles import (
    PUZZLE_META,
    SUBMIT_FLOPS_PER_S,
    GridTrainerConfig,
    grid_refusal,
    puzzle_shape,
)
from core.settings import Settings

HOW_TO_PASS_A_ROUTER = (
    'not given, so this bench would compare the untrained model with itself; pass {"router": '
    '"<train run id>"} (`trm demo` trains one), or {"router": "none"} to bench the untrained '
    "model on purpose"
)


def _refuse(field: str, message: str) -> ApiError:
    return ApiError(
        422, "validation_error", f"{field}: {message}", [{"field": field, "message": message}]
    )


def _generated_on_first_use(path: Path, data_dir: Path) -> bool:
    """DATA_DIR/benches/<name>/ of a shipped bench: the worker generates it (train.py)."""
    benches = (data_dir / "benches").resolve()
    if not path.resolve().is_relative_to(benches) or path.resolve() == benches:
        return False
    return path.resolve().relative_to(benches).parts[0] in bench_names()


def check_data_paths(resolved: dict[str, Any], data_dir: Path) -> None:
    for field, container, key in spec_path_fields(resolved):
        path = Path(container[key])
        try:
            exists = path.exists()
        except OSError as exc:  # a name too long for the file system, ...
            raise _refuse(field, f"{path} cannot be looked up: {exc.strerror}") from None
        if not exists and not _generated_on_first_use(path, data_dir):
            raise _refuse(field, f"{path} does not exist (under TRM_DATA_DIR {data_dir})")


def _run_id(ref: Any) -> str | None:
    """The run id of a bench side naming a run (`RUN` or `RUN:root|final`); None otherwise."""
    return ref.split(":")[0] if isinstance(ref, str) and BENCH_REF.match(ref) else None


def check_bench(resolved: dict[str, Any], settings: Settings, dry_run: bool) -> None:
    if resolved.get("kind") != "bench":
        return
    try:
        entry = load_entry(str(resolved.get("bench")))
    except KeyError:
        return  # the bench name's own 404/422 says it
    if entry.get("external"):  # its data first: without it nothing else matters
        check_external(entry, resolved, settings.data_dir)
    if resolved.get("baseline") == TRAIN_HERE:
        raise _refuse(
            "baseline", f"{TRAIN_HERE!r} is for the router only (a router trained in the run)"
        )
    if resolved.get("instances") and "instances" not in entry["defaults"]:
        raise _refuse("instances", f"bench {entry['name']} has no instances to choose")
    sides = {side: _run_id(resolved.get(side)) for side in ("router", "baseline")}
    wanted = {run_id for run_id in sides.values() if run_id}
    if wanted:
        with Session(get_engine(settings)) as db:
            query = select(Run.id, Run.kind, Run.status, Run.spec).where(col(Run.id).in_(wanted))
            known = {
                run_id: (kind, status, (spec or {}).get("trainer"))
                for run_id, kind, status, spec in db.exec(query).all()
            }
        for side, run_id in sides.items():
            if run_id:
                check_side(side, str(resolved.get(side)), run_id, known.get(run_id))
    if entry.get("external"):
        return
    if dry_run or resolved.get("router") is not None or resolved.get("results_jsonl"):
        return
    defaults = entry["defaults"]
    baseline = resolved.get("baseline") or defaults.get("baseline")
    if defaults.get("router") == "none" and baseline == "none":
        raise _refuse("router", HOW_TO_PASS_A_ROUTER)


def check_side(side: str, ref: str, run_id: str, found: tuple[str, str, Any] | None) -> None:
    """A side naming a run: the run is there and can still give what the bench reads. A train run
    that failed or was cancelled left no model; a hill-climb's picks exist once it has completed
    (its coordinator runs on the cpu queue, so a bench queued behind it would start first). A
    queued or running train run is accepted: behind it on one worker's queue the bench finds its
    model, unless it trains a whole-answer puzzle model, which no bench reads."""
    if found is None:
        raise _refuse(side, f"no run {run_id}")
    kind, status, trainer = found
    if kind == "train" and trainer == "trm_grid":
        raise _refuse(side, PUZZLE_MODEL.format(run=run_id))
    pick = ref.partition(":")[2]
    if pick and kind != "hillclimb":
        raise _refuse(
            side,
            f"run {run_id} is a {kind} run: :{pick} names a hill-climb's pick; name the run alone",
        )
    if pick and status != "completed":
        when = "once it has completed" if status in ("queued", "running") else "after a rerun"
        raise _refuse(
            side,
            f"hill-climb {run_id} is {status}, not completed: bench {ref} {when} "
            f"(wait_for_run, or trm watch {run_id})",
        )
    if status in ("failed", "cancelled"):
        raise _refuse(side, f"run {run_id} is {status}: it left no model to bench")


def check_external(entry: dict[str, Any], resolved: dict[str, Any], data_dir: Path) -> None:
    """A bench on a published data set: its data folder is there (nothing is downloaded) and
    it has a trained router to score."""
    name, defaults = entry["name"], entry["defaults"]
    data = external_data(entry, resolved.get("data"))
    if data is not None:  # else an installed package's: the worker checks it is there
        path = confine(data, "data", data_dir)
        if not path.is_dir():
            raise _refuse("data", f"bench {name}: no data at {path}; {entry.get('install')}")
    if (resolved.get("router") or defaults.get("router")) in ("none", TRAIN_HERE):
        raise _refuse(
            "router",
            f'bench {name} scores a trained router; pass {{"router": "<train run id>"}} '
            f"(a completed train run on a {entry['external']} corpus)",
        )


def check_controllers(resolved: dict[str, Any], settings: Settings) -> None:
    """A `decision_log` source names a controller the registry knows (a search's base too)."""
    for spec, prefix in ((resolved, ""), (resolved.get("base"), "base.")):
        corpus = spec.get("corpus") if isinstance(spec, dict) else None
        sources = corpus.get("sources") if isinstance(corpus, dict) else None
        for i, source in enumerate(sources if isinstance(sources, list) else []):
            if not isinstance(source, dict) or source.get("type") != "decision_log":
                continue
            name = source.get("controller")
            with Session(get_engine(settings)) as session:
                known = isinstance(name, str) and session.get(Controller, name) is not None
            if not known:
                raise _refuse(
                    f"{prefix}corpus.sources[{i}].controller",
                    f"no controller {name!r}: promote a run under that name (with log_decisions)",
                )


def check_puzzles(resolved: dict[str, Any], settings: Settings) -> None:
    """A trm_grid run: each source folder holds a puzzle set, and the work its knobs ask for on
    those puzzles fits TRM_MAX_SECONDS (unless a budget stops it in time) on the fastest device
    a worker may have; the worker checks again at its own device's rate."""
    if resolved.get("kind") != "train" or resolved.get("trainer") != "trm_grid":
        return
    cells, vocab = 0, 0
    for i, source in enumerate(resolved["corpus"]["sources"]):
        field = f"corpus.sources[{i}].path"
        meta_path = Path(source["path"]) / PUZZLE_META
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            shape = puzzle_shape(meta)
        except (OSError, ValueError, KeyError, TypeError):
            raise _refuse(
                field,
                f"{source['path']} holds no puzzle set ({PUZZLE_META}); write one with `trm envs "
                "generate --families sudoku --out DIR` (or maze) under TRM_DATA_DIR",
            ) from None
        cells, vocab = max(cells, shape[0]), max(vocab, shape[1])
    if (resolved.get("budget") or {}).get("max_seconds") is not None:
        return
    config = GridTrainerConfig.model_validate(resolved.get("trm_grid") or {})
    refusal = grid_refusal(config, cells, vocab, settings.max_seconds, SUBMIT_FLOPS_PER_S)
    if refusal:
        raise _refuse(*refusal)


def check_submit(resolved: dict[str, Any], settings: Settings, dry_run: bool) -> None:
    """The 422 of the first thing a run would miss; nothing when all is there."""
    check_data_paths(resolved, settings.data_dir)
    check_bench(resolved, settings, dry_run)
    check_controllers(resolved, settings)
    check_puzzles(resolved, settings)
