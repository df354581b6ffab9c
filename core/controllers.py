"""Controllers in use (SPEC §12): a completed train run (or a hill-climb's best) promoted under a
name as a new version, the version that answers for a name now, and the records the API, the CLI
and the decision process (`trm decide-server`) exchange.

A version is written once and never changed; `controllers.live_version` is the only thing that
moves (a promotion sets it to the new version, a rollback to an older one). The decision process
reads the same two tables to resolve `name[@version]` on every call, so a promotion is visible
to the next call once its transaction commits.

Light: the database and JSON files only (the API imports it; no torch, no worker).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlmodel import Session, col, select

from core.benches.resolve import trainer_of
from core.db import as_utc, one_writer, session_scope
from core.decisions import ShadowReport, shadow_report
from core.errors import ApiError
from core.models import Controller, ControllerVersion, Run, Stage, utcnow
from core.paths import is_run_id, under
from core.rundir import FEATURES, RUN_META, SCORECARD, TRAINER
from core.schemas.corpus import CONTROLLER_NAME
from core.schemas.hillclimb import PromoteBest
from core.settings import Settings

NAME_PATTERN = CONTROLLER_NAME
NAME_RULE = (
    "1-64 characters: lowercase letters, digits, '-' and '_', starting with a letter or digit"
)
_NAME = re.compile(NAME_PATTERN)
# What one decide call may carry (the controller's own bounds are these or looser); the body is
# bounded by TRM_MAX_BODY_BYTES too.
MAX_ROWS = 1024
MAX_STATE_CHARS = 256 * 1024
MAX_TOOLS = 256
MAX_TOOL_CHARS = 256
HEADLINE = ("train_score", "anchor_score", "failure_rate", "recovery_rate", "generalization_gap")

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=64)]
Tool = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TOOL_CHARS)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromoteIn(_Body):
    name: Name = Field(description=f"the controller's name: {NAME_RULE}")
    run_id: str = Field(
        max_length=26, description="a completed train run, or a completed hill-climb (its best)"
    )
    abstain_margin: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="a decision whose best score leads the next by less than this abstains",
    )
    by: str | None = Field(
        default=None, max_length=100, description="who promotes, as the client knows them"
    )
    log_decisions: bool | None = Field(
        default=None,
        description="record every decided row under a decision id (default: as the name was; "
        "off for a new name)",
    )


class RollbackIn(_Body):
    version: int = Field(ge=1, le=2**31 - 1)


class DecideRowIn(_Body):
    state: str = Field(max_length=MAX_STATE_CHARS)
    tools: list[Tool] = Field(min_length=1, max_length=MAX_TOOLS)


class DecideBody(_Body):
    """`POST /controllers/{name}/decide`: the name is in the path."""

    version: int | None = Field(default=None, ge=1, le=2**31 - 1)
    rows: list[DecideRowIn] = Field(min_length=1, max_length=MAX_ROWS)


class DecideIn(DecideBody):
    """The decision process's `POST /decide`: `controller` is `name` or `name@version`."""

    controller: str = Field(max_length=80)


class DecisionOut(BaseModel):
    action: str | None
    scores: list[float]
    margin: float
    abstain: bool
    # Set when the controller logs its decisions: the id to report this row's outcome under.
    decision_id: str | None = None


class DecideOut(BaseModel):
    controller: str
    version: int
    trainer: str
    model_hash: str
    decisions: list[DecisionOut]


class VersionOut(BaseModel):
    name: str
    version: int
    live: bool
    run_id: str
    source_run_id: str
    candidate_id: str | None
    trainer: str
    trainer_dir: str
    features_format: str | None
    anchor_score: float | None
    scores: dict[str, float | None]
    anchors: str | None
    abstain_margin: float | None
    promoted_by: str
    promoted_at: datetime

    @classmethod
    def of(cls, row: ControllerVersion, live_version: int | None) -> VersionOut:
        return cls(
            name=row.name,
            version=row.version,
            live=row.version == live_version,
            run_id=row.run_id,
            source_run_id=row.source_run_id,
            candidate_id=row.candidate_id,
            trainer=row.trainer,
            trainer_dir=row.trainer_dir,
            features_format=row.features_format,
            anchor_score=row.anchor_score,
            scores=dict(row.scores or {}),
            anchors=row.anchors,
            abstain_margin=row.abstain_margin,
            promoted_by=row.promoted_by,
            promoted_at=as_utc(row.promoted_at) or row.promoted_at,
        )


class ControllerOut(BaseModel):
    name: str
    live_version: int
    log_decisions: bool
    shadow_version: int | None
    # The shadow version's agreement with the live answers, and the outcomes split by it.
    shadow: ShadowReport | None
    live: VersionOut
    versions: list[VersionOut]


class ControllerSummary(BaseModel):
    name: str
    live_version: int
    versions: int
    live: VersionOut


class ControllerList(BaseModel):
    controllers: list[ControllerSummary]


def check_name(name: str, field: str = "path.name") -> str:
    if not _NAME.match(name):
        raise ApiError(
            422, "validation_error", f"{field}: a controller name is {NAME_RULE}",
            [{"field": field, "message": f"a controller name is {NAME_RULE}"}],
        )  # fmt: skip
    return name


def parse_ref(ref: str, version: int | None) -> tuple[str, int | None]:
    """`name` or `name@3` (and an optional `version` beside it, which must agree)."""
    name, at, pinned = ref.partition("@")
    check_name(name, "controller")
    if at:
        if not pinned.isdigit() or not 1 <= int(pinned) < 2**31:
            raise ApiError(
                422, "validation_error", "controller: after '@' comes a version number",
                [{"field": "controller", "message": "after '@' comes a version number"}],
            )  # fmt: skip
        if version is not None and version != int(pinned):
            message = f"names version {pinned}, the body's version says {version}"
            raise ApiError(
                422, "validation_error", f"controller: {message}",
                [{"field": "controller", "message": message}],
            )  # fmt: skip
        return name, int(pinned)
    return name, version


# ---- promotion ---------------------------------------------------------------------------------


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
            409, "not_completed",
            f"{what} {run_id} is {run.status}, not completed: promote it once it completes",
        )  # fmt: skip
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
            409, "no_best_candidate",
            f"hill-climb {search.id} kept no best candidate: nothing to promote",
        )  # fmt: skip
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
            409, "no_scorecard",
            f"run {run.id} has no {SCORECARD}: only a scored train run can be promoted",
        )  # fmt: skip
    folder = run_dir / TRAINER
    trainer = trainer_of(folder) if under(run_dir, folder) else None
    if trainer is None:
        raise _refuse(409, "no_model", f"run {run.id} holds no model in {TRAINER}/")
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
    """Number the version `build` makes as the name's next and make it live. Two promotions of
    one name at once get different numbers: the loser of the (name, version) race numbers again."""
    for attempt in range(5):
        try:
            with one_writer(engine), session_scope(engine) as session:
                row = build(session)
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


# ---- reading -----------------------------------------------------------------------------------


def _versions(session: Session, name: str) -> list[ControllerVersion]:
    return list(
        session.exec(
            select(ControllerVersion)
            .where(ControllerVersion.name == name)
            .order_by(col(ControllerVersion.version))
        ).all()
    )


def unknown(name: str) -> ApiError:
    return ApiError(404, "not_found", f"no controller {name!r}: promote a run under that name")


def show(session: Session, name: str) -> ControllerOut:
    live = session.get(Controller, name)
    if live is None:
        raise unknown(name)
    versions = [VersionOut.of(v, live.live_version) for v in _versions(session, name)]
    current = next(v for v in versions if v.live)
    shadow = live.shadow_version
    return ControllerOut(
        name=name, live_version=live.live_version, log_decisions=live.log_decisions,
        shadow_version=shadow, shadow=shadow_report(session, name, shadow) if shadow else None,
        live=current, versions=versions,
    )  # fmt: skip


def list_controllers(session: Session) -> ControllerList:
    lives = session.exec(select(Controller).order_by(col(Controller.name))).all()
    counts = dict(
        session.exec(
            select(ControllerVersion.name, sa.func.count()).group_by(ControllerVersion.name)
        ).all()
    )
    out = []
    for live in lives:
        row = get_version(session, live.name, live.live_version)
        out.append(
            ControllerSummary(
                name=live.name,
                live_version=live.live_version,
                versions=int(counts.get(live.name, 0)),
                live=VersionOut.of(row, live.live_version),
            )
        )
    return ControllerList(controllers=out)


def get_version(session: Session, name: str, version: int) -> ControllerVersion:
    row = session.exec(
        select(ControllerVersion).where(
            ControllerVersion.name == name, ControllerVersion.version == version
        )
    ).first()
    if row is None:
        raise ApiError(
            404, "not_found", f"controller {name!r} has no version {version}",
            [{"field": "version", "message": f"{name!r} has no version {version}"}],
        )  # fmt: skip
    return row


def resolve(session: Session, name: str, version: int | None) -> ControllerVersion:
    """The version that answers a call for `name` (the live one) or `name@version`."""
    if version is None:
        live = session.get(Controller, name)
        if live is None:
            raise unknown(name)
        version = live.live_version
    return get_version(session, name, version)


def rollback(engine: sa.Engine, name: str, version: int) -> ControllerOut:
    """Make an existing version live again (or any version: a roll forward is the same move)."""
    with one_writer(engine), session_scope(engine) as session:
        live = session.get(Controller, name)
        if live is None:
            raise unknown(name)
        get_version(session, name, version)
        make_live(live, version)
        session.add(live)
        session.flush()
        return show(session, name)


def make_live(live: Controller, version: int) -> None:
    """Make `version` live; a shadow that becomes the live version stops shadowing."""
    live.live_version, live.updated_at = version, utcnow()
    if live.shadow_version == version:
        live.shadow_version = None


def controller_row(session: Session, name: str) -> Controller:
    live = session.get(Controller, name)
    if live is None:
        raise unknown(name)
    return live


def live_versions(session: Session) -> dict[str, int]:
    """Every name's live version: the decision process polls this to keep them warm."""
    return dict(session.exec(select(Controller.name, Controller.live_version)).all())
