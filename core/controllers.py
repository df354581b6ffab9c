"""Controllers in use (SPEC §12): a completed train run (or a hill-climb's best) promoted under a
name as a new version, the version that answers for a name now, and the records the API, the CLI
and the decision process (`trm decide-server`) exchange.

A version is written once and never changed; `controllers.live_version` is the only thing that
moves (a promotion sets it to the new version, a rollback to an older one). The decision process
reads the same two tables to resolve `name[@version]` on every call, so a promotion is visible
to the next call once its transaction commits.

Promotion itself is core/promotion.py. Light: the database and JSON files only (the API imports
it; no torch, no worker).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlmodel import Session, col, select

from core.db import as_utc, one_writer, session_scope
from core.decisions import ShadowReport, shadow_report
from core.errors import ApiError
from core.models import Controller, ControllerVersion, utcnow
from core.schemas.common import CONTROLLER_NAME, CONTROLLER_NAME_RULE, PromotionTerms

NAME_PATTERN = CONTROLLER_NAME
NAME_RULE = CONTROLLER_NAME_RULE
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


class PromoteIn(PromotionTerms):
    run_id: str = Field(
        max_length=26, description="a completed train run, or a completed hill-climb (its best)"
    )
    by: str | None = Field(
        default=None, max_length=100, description="who promotes, as the client knows them"
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
    # Said when the version decides slowly (a qlora adapter scoring on a CPU).
    note: str | None = None


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
            422,
            "validation_error",
            f"{field}: a controller name is {NAME_RULE}",
            [{"field": field, "message": f"a controller name is {NAME_RULE}"}],
        )
    return name


def parse_ref(ref: str, version: int | None) -> tuple[str, int | None]:
    """`name` or `name@3` (and an optional `version` beside it, which must agree)."""
    name, at, pinned = ref.partition("@")
    check_name(name, "controller")
    if at:
        if not pinned.isdigit() or not 1 <= int(pinned) < 2**31:
            raise ApiError(
                422,
                "validation_error",
                "controller: after '@' comes a version number",
                [{"field": "controller", "message": "after '@' comes a version number"}],
            )
        if version is not None and version != int(pinned):
            message = f"names version {pinned}, the body's version says {version}"
            raise ApiError(
                422,
                "validation_error",
                f"controller: {message}",
                [{"field": "controller", "message": message}],
            )
        return name, int(pinned)
    return name, version


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
        name=name,
        live_version=live.live_version,
        log_decisions=live.log_decisions,
        shadow_version=shadow,
        shadow=shadow_report(session, name, shadow) if shadow else None,
        live=current,
        versions=versions,
    )


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
            404,
            "not_found",
            f"controller {name!r} has no version {version}",
            [{"field": "version", "message": f"{name!r} has no version {version}"}],
        )
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
