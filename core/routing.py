"""How a named controller's calls are answered and recorded (SPEC §12): its decision log on or
off, a shadow version that scores beside the live one, the shadow's promotion when its agreement
meets a bound, and `route`, which the decision process reads once per call.

Light: the database only (the API and the decision process import it).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from core.controllers import (
    ControllerOut,
    controller_row,
    get_version,
    make_live,
    show,
    unknown,
)
from core.db import one_writer, session_scope
from core.decisions import shadow_report
from core.errors import ApiError
from core.models import Controller, ControllerVersion, utcnow


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SettingsIn(_Body):
    """`PATCH /controllers/{name}`."""

    log_decisions: bool


class ShadowIn(_Body):
    """`POST /controllers/{name}/shadow`: the version to run beside the live one; null clears."""

    version: int | None = Field(ge=1, le=2**31 - 1)


class PromoteShadowIn(_Body):
    """`POST /controllers/{name}/promote-shadow`: the bound the shadow's record must meet."""

    min_decisions: int = Field(default=100, ge=1, le=2**31 - 1)
    min_agreement: float = Field(default=0.9, ge=0.0, le=1.0)


def set_logging(engine: sa.Engine, name: str, body: SettingsIn) -> ControllerOut:
    with one_writer(engine), session_scope(engine) as session:
        live = controller_row(session, name)
        live.log_decisions, live.updated_at = body.log_decisions, utcnow()
        session.add(live)
        session.flush()
        return show(session, name)


def set_shadow(engine: sa.Engine, name: str, version: int | None) -> ControllerOut:
    """Run `version` beside the live one on every call for `name` (None: stop)."""
    with one_writer(engine), session_scope(engine) as session:
        live = controller_row(session, name)
        if version is not None:
            get_version(session, name, version)
            if version == live.live_version:
                message = f"version {version} is the live version: shadow another one"
                raise ApiError(
                    422,
                    "validation_error",
                    f"version: {message}",
                    [{"field": "version", "message": message}],
                )
        live.shadow_version, live.updated_at = version, utcnow()
        session.add(live)
        session.flush()
        return show(session, name)


def promote_shadow(engine: sa.Engine, name: str, bound: PromoteShadowIn) -> ControllerOut:
    """Make the shadow version live, only when it has shadowed at least `min_decisions` rows
    and chose the live answer on at least `min_agreement` of them; a 409 naming the figures
    otherwise."""
    with one_writer(engine), session_scope(engine) as session:
        live = controller_row(session, name)
        if live.shadow_version is None:
            raise ApiError(409, "no_shadow", f"{name!r} has no shadow version: set one first")
        report = shadow_report(session, name, live.shadow_version)
        rate = report.agreement_rate or 0.0
        if report.decisions < bound.min_decisions or rate < bound.min_agreement:
            message = (
                f"shadow version {report.version} agreed on {report.agreed} of "
                f"{report.decisions} decisions ({rate:.3f}); the bound is at least "
                f"{bound.min_decisions} decisions and {bound.min_agreement:g} agreement"
            )
            raise ApiError(
                409,
                "shadow_short",
                message,
                {
                    "shadow": report.model_dump(mode="json"),
                    "min_decisions": bound.min_decisions,
                    "min_agreement": bound.min_agreement,
                },
            )
        make_live(live, live.shadow_version)
        session.add(live)
        session.flush()
        return show(session, name)


@dataclass(frozen=True)
class Routing:
    """What answers one decide call: the deciding version, whether its rows are logged, and the
    version that scores beside it (only beside the live version, never a pinned one)."""

    version: ControllerVersion
    log: bool
    shadow: ControllerVersion | None


def route(session: Session, name: str, version: int | None) -> Routing:
    live = session.get(Controller, name)
    if live is None:
        raise unknown(name)
    row = get_version(session, name, live.live_version if version is None else version)
    shadow = None
    if live.shadow_version is not None and row.version == live.live_version:
        shadow = get_version(session, name, live.shadow_version)
    return Routing(row, live.log_decisions or shadow is not None, shadow)
