"""Promotion (SPEC §12): a completed train run, a finished hill-climb's best, or a bench's own
trained router recorded as a controller name's next version and made live; a hill-climb whose
spec asks promotes its best as it ends (`promote_search_best`).

Light: the database and JSON files only (the API and the hill-climb's finalize stage import it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, select

from core.benches.resolve import PUZZLE_MODEL, trainer_of
from core.controllers import HEADLINE, PromoteIn, VersionOut, make_live
from core.db import one_writer, session_scope
from core.errors import ApiError
from core.models import Controller, ControllerVersion, Run, Stage
from core.paths import is_run_id, under
from core.rundir import FEATURES, RUN_META, SCORECARD, TRAINER
from core.schemas.hillclimb import PromoteBest
from core.settings import Settings


def _read_json(path: Path, root: Path) -> dict[str, Any] | None:
    if not path.is_file() or not under(root, path):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _refuse(status: int, code: str, message: str) -> ApiError:
    return ApiError(status, code, message, [{"field": "run_id", "message": message}])


def _completed_run(session: Session, run_id: str, what: str) -> Run:
    run = session.get(Run, run_id) if is_run_id(run_id) else None
    if run is None:
        raise _refuse(404, "not_found", f"no run {run_id!r}")
    if run.kind not in ("train", "hillclimb", "bench"):
        raise _refuse(
            422,
            "validation_error",
            f"run {run_id} is a {run.kind} run, not a train run (or a hill-climb, for its best, "
            "or a bench that trained its router)",
        )
    if run.dry_run:
        raise _refuse(422, "validation_error", f"run {run_id} is a dry run: it trained nothing")
    if run.status != "completed":
        raise _refuse(
            409,
            "not_completed",
            f"{what} {run_id} is {run.status}, not completed: promote it once it completes",
        )
    return run


def _best_of_search(session: Session, search: Run) -> tuple[str, str | None]:
    """The train run of a finished hill-climb's best candidate (its `finalize` manifest)."""
    stage = session.exec(
        select(Stage).where(Stage.run_id == search.id, Stage.name == "finalize")
    ).first()
    manifest = (stage.manifest if stage else None) or {}
    best_run, candidate = manifest.get("best_run"), manifest.get("best_candidate")
    if not isinstance(best_run, str) or not is_run_id(best_run):
        raise _refuse(
            409,
            "no_best_candidate",
            f"hill-climb {search.id} kept no best candidate: nothing to promote",
        )
    return best_run, candidate if isinstance(candidate, str) and len(candidate) <= 64 else None


def _anchors_description(run: Run, card: dict[str, Any]) -> str:
    split = (run.spec.get("corpus") or {}).get("split") or {}
    worlds = split.get("anchor") if isinstance(split, dict) else None
    n = (card.get("n") or {}).get("anchor") if isinstance(card.get("n"), dict) else None
    where = card.get("anchor_split") or "anchor"
    text = f"{where} split"
    if isinstance(worlds, list) and worlds:
        text += f" ({', '.join(str(w) for w in worlds[:8])}{', ...' if len(worlds) > 8 else ''})"
    if isinstance(n, int):
        text += f", {n} rows"
    return text


def _features_format(trainer: str, folder: Path) -> str | None:
    if trainer == "qlora":
        meta = _read_json(folder / RUN_META, folder) or {}
        return f"prompt:{meta.get('contract') or 'action_only'}"
    fmt = (_read_json(folder / FEATURES, folder) or {}).get("format")
    return str(fmt)[:64] if fmt is not None else None


def _number(value: Any) -> float | None:
    """A scorecard figure as stored: a finite number, else None (a real 0.0 stays 0.0)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _version_row(
    session: Session,
    settings: Settings,
    run: Run,
    name: str,
    source: tuple[str, str | None],
    abstain_margin: float | None,
    promoted_by: str,
) -> ControllerVersion:
    """The version record of completed train run `run`, checked; not yet numbered. `source` is
    what was promoted: the run itself, or a hill-climb and its candidate."""
    run_dir = settings.run_dir(run.id)
    card = _read_json(run_dir / SCORECARD, run_dir)
    if card is None:
        raise _refuse(
            409,
            "no_scorecard",
            f"run {run.id} has no {SCORECARD}: only a scored train run can be promoted",
        )
    folder = run_dir / TRAINER
    trainer = trainer_of(folder) if under(run_dir, folder) else None
    if trainer is None:
        raise _refuse(409, "no_model", f"run {run.id} holds no model in {TRAINER}/")
    if trainer == "trm_grid":
        raise _refuse(409, "not_a_controller", PUZZLE_MODEL.format(run=run.id))
    scores = {k: _number(card.get(k)) for k in HEADLINE}
    return ControllerVersion(
        name=name,
        version=0,
        run_id=run.id,
        source_run_id=source[0],
        candidate_id=source[1],
        trainer=trainer,
        trainer_dir=f"{run.id}/{TRAINER}",
        features_format=_features_format(trainer, folder),
        anchor_score=scores["anchor_score"],
        scores=scores,
        anchors=_anchors_description(run, card),
        abstain_margin=abstain_margin,
        promoted_by=promoted_by,
    )


def _asked_row(
    session: Session, settings: Settings, req: PromoteIn, promoted_by: str
) -> ControllerVersion:
    """The version record of the run `req` names: a train run, or a finished hill-climb's best."""
    asked = _completed_run(session, req.run_id, "run")
    run, candidate = asked, None
    if asked.kind == "hillclimb":
        best_run, candidate = _best_of_search(session, asked)
        run = _completed_run(session, best_run, f"hill-climb {asked.id}'s best run")
        if run.kind != "train":
            raise _refuse(409, "no_best_candidate", f"run {best_run} is not a train run")
    elif asked.kind == "bench" and not (settings.run_dir(asked.id) / TRAINER).is_dir():
        router = asked.spec.get("router")
        raise _refuse(
            409,
            "no_model",
            f"bench {asked.id} trained no router of its own (it scored {router!r}): promote "
            "the train run it names, or bench with router 'train'",
        )
    source = (asked.id, candidate)
    return _version_row(session, settings, run, req.name, source, req.abstain_margin, promoted_by)


def _record(
    engine: sa.Engine, build: Callable[[Session], ControllerVersion], log_decisions: bool | None
) -> VersionOut:
    """Number the version `build` makes as the name's next and make it live. Promotions of one
    name at once queue on a lock of that name (Postgres: a transaction advisory lock; SQLite
    takes one writer), so each numbers after the last commits; a (name, version) clash left
    anyway (another kind of writer) numbers again."""
    for attempt in range(5):
        try:
            with one_writer(engine), session_scope(engine) as session:
                row = build(session)
                _lock_name(session, row.name)
                last = session.exec(
                    select(sa.func.max(ControllerVersion.version)).where(
                        ControllerVersion.name == row.name
                    )
                ).one()
                row.version = int(last or 0) + 1
                session.add(row)
                live = session.get(Controller, row.name)
                if live is None:
                    live = Controller(name=row.name, live_version=row.version)
                make_live(live, row.version)
                if log_decisions is not None:
                    live.log_decisions = log_decisions
                session.add(live)
                session.flush()
                return VersionOut.of(row, row.version)
        except sa.exc.IntegrityError:
            if attempt == 4:
                raise
    raise AssertionError("not reached")


def _lock_name(session: Session, name: str) -> None:
    """Hold the controller name's lock until this transaction ends (Postgres only)."""
    if session.get_bind().dialect.name == "postgresql":
        key = sa.func.hashtextextended(f"trm.controller:{name}", 0)
        session.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


def promote(engine: sa.Engine, settings: Settings, req: PromoteIn, promoted_by: str) -> VersionOut:
    """Record the run as the name's next version and make it live."""
    return _record(
        engine,
        lambda session: _asked_row(session, settings, req, promoted_by),
        req.log_decisions,
    )


def promote_search_best(
    engine: sa.Engine,
    settings: Settings,
    search_id: str,
    best: tuple[str, str],
    asked: PromoteBest,
) -> VersionOut:
    """A hill-climb's spec asked for its best candidate (`best`: its train run and candidate id)
    to be promoted as the search ends. Once per search: the finalize stage run again after a
    restart finds the version it made and returns it."""
    with session_scope(engine) as session:
        made = session.exec(
            select(ControllerVersion).where(
                ControllerVersion.name == asked.name, ControllerVersion.source_run_id == search_id
            )
        ).first()
        if made is not None:
            live = session.get(Controller, asked.name)
            return VersionOut.of(made, live.live_version if live else None)

    def build(session: Session) -> ControllerVersion:
        run = _completed_run(session, best[0], f"hill-climb {search_id}'s best run")
        if run.kind != "train":
            raise _refuse(409, "no_best_candidate", f"run {run.id} is not a train run")
        by = f"hill-climb {search_id}"
        return _version_row(
            session, settings, run, asked.name, (search_id, best[1]), asked.abstain_margin, by
        )

    return _record(engine, build, asked.log_decisions)
