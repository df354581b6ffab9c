"""Candidates as child `train` runs (SPEC §8): created like any run, queued on the `gpu` queue so
`parallelism` of them run at once on as many workers, and read back from the results their own
`evaluate` stages recorded in the database (never from files in their run directories).

`Launcher` is what the coordinator needs; `ServiceLauncher` is the real one (database + arq, and
the dry-run corpus build that tells a candidate's corpus hash before it trains).
Tests of the search logic use their own launcher that scores knob sets with a pure function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlmodel import Session, col, select

from core.db import as_utc
from core.errors import ApiError
from core.events import Publisher
from core.models import TERMINAL_STATUSES, Run, Stage
from core.runs import cancel_run, candidate_key, submit_run
from core.settings import Settings
from worker.context import StageFailure
from worker.hillclimb.decide import SCORES
from worker.hillclimb.screen import Screen, screen_corpus


@dataclass
class Outcome:
    status: str  # completed | failed | cancelled
    scores: dict[str, float | None] = field(default_factory=dict)
    corpus_hash: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)  # the child run's usage record


class Launcher(Protocol):
    def launch(self, candidate_id: str, body: dict[str, Any]) -> str:
        """Create (or find again, same candidate) the child run; its run id."""

    def poll(self, run_ids: list[str]) -> dict[str, Outcome]:
        """The outcomes of the runs among `run_ids` that have ended."""

    def cancel(self, run_ids: list[str]) -> None: ...

    def screen(self, body: dict[str, Any]) -> Screen | None:
        """The corpus hash the child spec `body` would train on (None: not known before it runs)."""

    def stop_reason(self) -> str | None:
        """'cancel' when the search itself was cancelled, 'lost' when it left our hands."""


def recorded_scores(
    session: Session, run_id: str
) -> tuple[dict[str, float | None] | None, str | None]:
    """(scores, corpus_hash) as the candidate's own stages recorded them in the database: the
    `evaluate` stage's result and the `prepare_corpus` stage's. Never from scorecard.json or the
    corpus manifest: those are files in a run directory, which is not where a score is trusted
    from (the runner stores a stage's result from the worker's own child outcome)."""
    stages = session.exec(
        select(Stage).where(
            Stage.run_id == run_id, col(Stage.name).in_(("evaluate", "prepare_corpus"))
        )
    ).all()
    results = {
        s.name: (s.manifest or {}).get("result") or {} for s in stages if s.status == "completed"
    }
    scores: dict[str, float | None] | None = None
    if "evaluate" in results:
        card = results["evaluate"]
        scores = {key: _number(card.get(key)) for key in SCORES}
        if scores["generalization_gap"] is None and None not in (
            scores["train_score"],
            scores["anchor_score"],
        ):
            scores["generalization_gap"] = scores["train_score"] - scores["anchor_score"]  # type: ignore[operator]
    corpus_hash = (results.get("prepare_corpus") or {}).get("corpus_hash")
    return scores, corpus_hash if isinstance(corpus_hash, str) else None


def _number(value: Any) -> float | None:
    if isinstance(value, dict):  # {"value": x, "interval": [...]}
        value = value.get("value")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class ServiceLauncher:
    def __init__(self, publisher: Publisher, settings: Settings, search_id: str) -> None:
        self.publisher, self.settings, self.search_id = publisher, settings, search_id
        with Session(publisher.engine) as session:
            run = session.get(Run, search_id)
            self.lease_token = run.lease_token if run else None

    def launch(self, candidate_id: str, body: dict[str, Any]) -> str:
        # Imported on use, like the API's validation they bring: every stage's child process
        # loads the kinds, and only the search launches.
        key = candidate_key(self.search_id, candidate_id)
        try:
            run, _ = submit_run(self.publisher, self.settings, body, key, parent_id=self.search_id)
        except ApiError as exc:
            raise StageFailure("bad_input", f"candidate {candidate_id}: {exc.message}") from None
        return run.id

    def poll(self, run_ids: list[str]) -> dict[str, Outcome]:
        if not run_ids:
            return {}
        with Session(self.publisher.engine) as session:
            runs = session.exec(select(Run).where(col(Run.id).in_(run_ids))).all()
            recorded = {
                run.id: recorded_scores(session, run.id)
                for run in runs
                if run.status in TERMINAL_STATUSES
            }
        ended: dict[str, Outcome] = {}
        for run in runs:
            if run.status not in TERMINAL_STATUSES:
                continue
            scores, corpus_hash = recorded[run.id]
            status, reason = run.status, run.failure_reason
            if status == "completed" and scores is None:
                status, reason = "failed", f"run {run.id} completed without an evaluate result"
            ended[run.id] = Outcome(
                status=status,
                scores=scores or {},
                corpus_hash=corpus_hash,
                started_at=as_utc(run.started_at),
                finished_at=as_utc(run.finished_at),
                reason=reason if status != "completed" else None,
                usage=dict(run.usage or {}),
            )
        return ended

    def screen(self, body: dict[str, Any]) -> Screen | None:
        return screen_corpus(body)

    def cancel(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            try:
                cancel_run(self.publisher, run_id)
            except ApiError:
                continue  # it ended meanwhile

    def stop_reason(self) -> str | None:
        with Session(self.publisher.engine) as session:
            run = session.get(Run, self.search_id)
        if run is None or run.status != "running" or run.lease_token != self.lease_token:
            return "lost"
        return "cancel" if run.cancel_requested else None
