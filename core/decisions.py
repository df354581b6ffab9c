"""The decision log (SPEC §12): the rows a controller decided, each under a decision id the caller
reports the outcome with, and what a shadow version would have answered beside it.

- **Written** by the decision process (`trm decide-server`), one insert per decide call, in the
  call (`record` says what that costs): a decision id in the answer is already in the table,
  so an outcome reported the moment the answer arrives finds it. A controller's rows are
  logged when it opts in (`log_decisions`), and while a shadow version runs beside its live one
  (agreement is recorded per row, so shadowing logs what it compares).
- **Bounded**: a row is as large as the decide limits allow (core/controllers.py); the decision
  process keeps the newest TRM_DECISION_LOG_KEEP rows per controller (`prune`, every PRUNE_S).
- **Outcomes**: one per decision; a second report for the same decision replaces the first (the
  latest word wins; the answer counts the replaced ones).
- **Read back** as corpus rows by the `decision_log` source (worker/corpus/decision_log.py) through
  `read_for_corpus`.

Light: the database only (the API and the decision process import it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlmodel import Session, col, select

from core.db import as_utc, one_writer, session_scope
from core.errors import ApiError
from core.models import DecisionRecord, utcnow

MAX_OUTCOMES = 1024  # outcomes per report
MAX_REWARD = 1e6  # |reward|
MAX_NOTES = 500
MAX_PAGE = 500
# A page's states and tools, in characters: a row may hold 256 KiB of state, so 500 of them were
# 128 MiB read into the API at once (and several times that as the answer was built).
MAX_PAGE_CHARS = 4 * 1024 * 1024
PRUNE_S = 60.0  # how often the decision process trims each controller's log to its cap

DecisionId = Annotated[str, StringConstraints(min_length=1, max_length=26)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutcomeIn(_Body):
    decision_id: DecisionId
    success: bool
    reward: float | None = Field(default=None, ge=-MAX_REWARD, le=MAX_REWARD, allow_inf_nan=False)
    notes: str | None = Field(default=None, max_length=MAX_NOTES)


class OutcomesIn(_Body):
    outcomes: list[OutcomeIn] = Field(min_length=1, max_length=MAX_OUTCOMES)


class OutcomesOut(BaseModel):
    recorded: int
    replaced: int = Field(description="decisions whose earlier outcome this report replaced")


class Outcome(BaseModel):
    success: bool
    reward: float | None
    notes: str | None
    reported_at: datetime


class LoggedDecision(BaseModel):
    id: str
    version: int
    state: str
    tools: list[str]
    action: str | None
    scores: list[float]
    margin: float
    abstain: bool
    shadow_version: int | None
    shadow_action: str | None
    shadow_agrees: bool | None
    decided_at: datetime
    outcome: Outcome | None

    @classmethod
    def of(cls, row: DecisionRecord) -> LoggedDecision:
        outcome = None
        if row.success is not None:
            outcome = Outcome(
                success=row.success,
                reward=row.reward,
                notes=row.notes,
                reported_at=as_utc(row.outcome_at) or utcnow(),
            )
        shadowed = row.shadow_version is not None
        return cls(
            id=row.id,
            version=row.version,
            state=row.state,
            tools=list(row.tools),
            action=row.action,
            scores=list(row.scores),
            margin=row.margin,
            abstain=row.abstain,
            shadow_version=row.shadow_version,
            shadow_action=row.shadow_action,
            shadow_agrees=(row.shadow_action == row.action) if shadowed else None,
            decided_at=as_utc(row.decided_at) or row.decided_at,
            outcome=outcome,
        )


class DecisionPage(BaseModel):
    name: str
    decisions: list[LoggedDecision]
    # Pass as `before` for the next (older) page; None on the last page.
    next_before: str | None


class OutcomeSplit(BaseModel):
    """The reported outcomes of the live decisions on one side of the shadow's agreement."""

    reported: int
    succeeded: int
    success_rate: float | None
    mean_reward: float | None


class ShadowReport(BaseModel):
    version: int
    decisions: int
    agreed: int
    agreement_rate: float | None
    when_agreed: OutcomeSplit
    when_disagreed: OutcomeSplit


# ---- writing -----------------------------------------------------------------------------------


def record(engine: sa.Engine, rows: Sequence[DecisionRecord]) -> None:
    """One decide call's rows, in one statement and one transaction, on the decide path: a
    core insert (the ORM's unit of work cost 5 ms more for 32 rows on SQLite), and on Postgres
    without waiting for the commit's disk flush (`synchronous_commit = off`: 7 ms to 0.7 ms for
    one row). The rows are visible to every reader at once; a crash of the database server may
    lose the last fraction of a second of the log, never corrupt it."""
    with one_writer(engine), engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(sa.text("SET LOCAL synchronous_commit = off"))
        connection.execute(sa.insert(DecisionRecord), [row.model_dump() for row in rows])


def prune(engine: sa.Engine, keep: int) -> int:
    """Delete each controller's rows beyond its newest `keep`; how many went."""
    gone = 0
    with one_writer(engine), session_scope(engine) as session:
        names = session.exec(select(DecisionRecord.name).distinct()).all()
        for name in names:
            cutoff = session.exec(
                select(DecisionRecord.id)
                .where(DecisionRecord.name == name)
                .order_by(col(DecisionRecord.id).desc())
                .offset(keep)
                .limit(1)
            ).first()
            if cutoff is not None:
                result = session.execute(
                    sa.delete(DecisionRecord).where(
                        col(DecisionRecord.name) == name, col(DecisionRecord.id) <= cutoff
                    )
                )
                gone += int(getattr(result, "rowcount", 0) or 0)
    return gone


def report_outcomes(engine: sa.Engine, name: str, body: OutcomesIn) -> OutcomesOut:
    """Record every outcome of `body` or none: an id this controller never logged is a 404
    naming it (`outcomes[2].decision_id`), an id given twice in one report a 422."""
    ids = [o.decision_id for o in body.outcomes]
    seen: set[str] = set()
    for i, decision_id in enumerate(ids):
        if decision_id in seen:
            raise ApiError(
                422,
                "validation_error",
                f"outcomes[{i}].decision_id: {decision_id} is given twice",
                [{"field": f"outcomes[{i}].decision_id", "message": "given twice in one report"}],
            )
        seen.add(decision_id)
    with one_writer(engine), session_scope(engine) as session:
        found = {
            row.id: row
            for row in session.exec(
                select(DecisionRecord).where(
                    DecisionRecord.name == name, col(DecisionRecord.id).in_(ids)
                )
            ).all()
        }
        missing = [(i, d) for i, d in enumerate(ids) if d not in found]
        if missing:
            details = [
                {"field": f"outcomes[{i}].decision_id", "message": f"{name!r} logged no {d}"}
                for i, d in missing
            ]
            raise ApiError(
                404,
                "not_found",
                f"{name!r} logged no decision {missing[0][1]}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + ": report outcomes of decisions a logging controller answered",
                details,
            )
        now, replaced = utcnow(), 0
        for given in body.outcomes:
            row = found[given.decision_id]
            replaced += row.success is not None
            row.success, row.reward, row.notes = given.success, given.reward, given.notes
            row.outcome_at = now
            session.add(row)
    return OutcomesOut(recorded=len(ids), replaced=replaced)


# ---- reading -----------------------------------------------------------------------------------


def list_decisions(
    session: Session, name: str, limit: int, before: str | None, with_outcomes: bool | None
) -> DecisionPage:
    """Newest first; `with_outcomes` True: only those with an outcome, False: only those
    without, None: all. At most `limit` rows, and no more than MAX_PAGE_CHARS of states and
    tools (one row at least): their sizes are read first, then only the rows that fit."""
    where = [col(DecisionRecord.name) == name]
    if before is not None:
        where.append(col(DecisionRecord.id) < before)
    if with_outcomes is not None:
        has = col(DecisionRecord.success).is_not(None)
        where.append(has if with_outcomes else sa.not_(has))
    size = sa.func.length(DecisionRecord.state) + sa.func.length(
        sa.cast(DecisionRecord.tools, sa.Text)
    )
    sizes = session.execute(
        sa.select(col(DecisionRecord.id), size)
        .where(*where)
        .order_by(col(DecisionRecord.id).desc())
        .limit(limit + 1)
    ).all()
    ids: list[str] = []
    total = 0
    for row_id, chars in sizes[:limit]:
        total += int(chars or 0)
        if ids and total > MAX_PAGE_CHARS:
            break
        ids.append(row_id)
    query = select(DecisionRecord).where(col(DecisionRecord.id).in_(ids))
    rows = session.exec(query.order_by(col(DecisionRecord.id).desc())).all() if ids else []
    page = [LoggedDecision.of(r) for r in rows]
    more = len(sizes) > len(page)
    return DecisionPage(name=name, decisions=page, next_before=page[-1].id if more else None)


def _split(session: Session, where: list[sa.ColumnElement[bool]]) -> OutcomeSplit:
    reported, succeeded, mean = session.execute(
        select(
            sa.func.count(),
            sa.func.sum(sa.case((col(DecisionRecord.success).is_(True), 1), else_=0)),
            sa.func.avg(DecisionRecord.reward),
        ).where(*where, col(DecisionRecord.success).is_not(None))
    ).one()
    reported, succeeded = int(reported or 0), int(succeeded or 0)
    return OutcomeSplit(
        reported=reported,
        succeeded=succeeded,
        success_rate=succeeded / reported if reported else None,
        mean_reward=float(mean) if mean is not None and math.isfinite(mean) else None,
    )


def shadow_report(session: Session, name: str, version: int) -> ShadowReport:
    """How often `version`, shadowing `name`, chose what the live version answered, and the
    outcomes reported for the live decisions where it agreed and where it did not."""
    shadowed = [col(DecisionRecord.name) == name, col(DecisionRecord.shadow_version) == version]
    agrees = col(DecisionRecord.shadow_action) == col(DecisionRecord.action)
    total, agreed = session.execute(
        select(sa.func.count(), sa.func.sum(sa.case((agrees, 1), else_=0))).where(*shadowed)
    ).one()
    total, agreed = int(total or 0), int(agreed or 0)
    return ShadowReport(
        version=version,
        decisions=total,
        agreed=agreed,
        agreement_rate=agreed / total if total else None,
        when_agreed=_split(session, [*shadowed, agrees]),
        when_disagreed=_split(session, [*shadowed, sa.not_(agrees)]),
    )


def read_for_corpus(
    session: Session, name: str, versions: list[int] | None, limit: int
) -> list[DecisionRecord]:
    """The newest `limit` rows `name` logged (of `versions`, when given), oldest first."""
    query = select(DecisionRecord).where(DecisionRecord.name == name)
    if versions:
        query = query.where(col(DecisionRecord.version).in_(versions))
    rows = list(session.exec(query.order_by(col(DecisionRecord.id).desc()).limit(limit)).all())
    rows.reverse()
    return rows
