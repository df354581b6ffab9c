"""Runs one attempt of a run: claim it, execute its kind's stages in order, and finish it.

Read top to bottom: `execute` → `_claim` → `_run_stages` (each stage inline or in a child
process, each recorded by the StageRecorder) → `_finish` (status, summary.json, usage).

It knows no kind: the stages, the dry run, the card's `data` line and the kind's own fields of
summary.json all come from the kind's entry in `worker.kinds.KINDS`.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from core.card import Card, measure_ram, write_snapshot
from core.db import DATABASE_AWAY, retrying
from core.events import Publisher
from core.models import Run, Stage, utcnow
from core.rundir import (
    MANIFEST,
    SNAPSHOT,
    SUMMARY,
    dry_run_outputs,
    stage_outputs,
    write_json_atomic,
)
from core.runstate import set_status
from core.settings import Settings
from worker.artifact_sync import UploadPass, sync_stage, upload_url
from worker.child import ChildStage, run_stage
from worker.context import FENCED, StageContext, StageFailure
from worker.kinds import KINDS, StageDef
from worker.lease import Lease
from worker.manifests import StageRecorder
from worker.usage import Usage

log = logging.getLogger("trm.worker")
POLL_S = 0.05
TIMEOUT = "timeout"  # the stop reason of an attempt past its job timeout (TRM_JOB_TIMEOUT_S)


@dataclass
class Ending:
    status: str  # completed | failed | cancelled | interrupted | lost
    failure_class: str | None = None
    reason: str | None = None
    stopped_by: str | None = None


class _MovedOn(Exception):
    """The run left our lease before we could record its end; roll the transaction back."""


class Runner:
    def __init__(self, settings: Settings, publisher: Publisher, worker_id: str) -> None:
        self.settings, self.publisher, self.worker_id = settings, publisher, worker_id
        self.engine = publisher.engine
        self.shutdown = threading.Event()
        # Run id -> the time.monotonic() at which its attempt's job timeout (TRM_JOB_TIMEOUT_S)
        # falls: the stage is stopped then and the run fails `timeout` (`expire` brings it now).
        self.time_up: dict[str, float] = {}

    def expire(self, run_id: str) -> None:
        """The job running `run_id` timed out (arq cancelled it): stop its stage now."""
        self.time_up[run_id] = 0.0

    # -- claim ---------------------------------------------------------------------------------
    def execute(self, run_id: str, attempt: int) -> str:
        limit = time.monotonic() + self.settings.job_timeout_s
        self.time_up[run_id] = min(self.time_up.get(run_id, limit), limit)
        try:
            return self._execute(run_id, attempt)
        finally:
            self.time_up.pop(run_id, None)

    def _execute(self, run_id: str, attempt: int) -> str:
        run = self._claim(run_id, attempt)
        if run is None:
            return "not_claimed"
        lease = Lease(self.engine, self.settings, run.id, run.lease_token, self.worker_id)
        lease.pids.append(os.getpid())
        lease.start()
        usage = Usage.resume(run.usage, time.time())
        try:
            ending = self._dry_run(run) if run.dry_run else self._run_stages(run, lease, usage)
        except DATABASE_AWAY as exc:  # the run is not at fault: another attempt carries on
            log.warning("run %s: the database stayed away: %s", run_id, type(exc).__name__)
            ending = self._database_away()
        except Exception as exc:  # the runner itself failed: say so on the run, never leave it
            log.exception("run %s failed in the runner", run_id)
            ending = Ending("failed", "internal", f"runner error: {type(exc).__name__}: {exc}")
        finally:
            lease.stop()
        if ending.status != "lost":
            usage.finish(lease.peak_rss)
            self._finish(run, ending, usage)
        return ending.status

    def _claim(self, run_id: str, attempt: int) -> Run | None:
        with self.publisher.transaction() as tx:
            run = tx.session.get(Run, run_id)
            if run is None or run.status != "queued" or run.attempt != attempt:
                return None
            if run.cancel_requested:
                set_status(tx, run, "cancelled")
                return None
            record = {
                "attempt": attempt,
                "worker_id": self.worker_id,
                "started_at": utcnow().isoformat(),
                "ended_at": None,
                "outcome": None,
            }
            claimed = set_status(
                tx,
                run,
                "running",
                worker_id=self.worker_id,
                lease_token=run.lease_token + 1,
                upload_key=secrets.token_urlsafe(32),  # a new attempt fences the old one's uploads
                heartbeat_at=utcnow(),
                attempts=[*(run.attempts or []), record],
            )
            return run if claimed else None

    # -- stages --------------------------------------------------------------------------------
    def _card(self, run: Run) -> Card:
        base = dict(run.card or {})
        base.update(
            run_id=run.id,
            kind=run.kind,
            status="running",
            attempt=run.attempt,
            worker=self.worker_id,
            trainer=run.spec.get("trainer"),
        )
        base.setdefault("data_source", KINDS[run.kind].data_source(run.spec))
        return Card(**{k: v for k, v in base.items() if k in Card.model_fields})

    def _context(self, run: Run, stage: str, card: Card, **progress: Any) -> StageContext:
        """The context a stage of this run gets; `progress`: its deadline, its share of the
        percent bar and the attempt's start."""
        return StageContext(
            run_id=run.id,
            kind=run.kind,
            stage=stage,
            attempt=run.attempt,
            run_dir=self.settings.run_dir(run.id),
            settings=self.settings,
            publisher=self.publisher,
            card=card,
            spec=run.spec,
            **progress,
        )

    def _run_stages(self, run: Run, lease: Lease, usage: Usage) -> Ending:
        stages = KINDS[run.kind].stages
        recorder = StageRecorder(self.publisher, run.id, self.settings.run_dir(run.id), run.attempt)
        done = self._completed_stages(run.id)
        card = self._card(run)
        total_weight = sum(s.weight for s in stages)
        deadline = usage.deadline(run.spec.get("budget", {}).get("max_seconds"))
        percent = 0.0
        ending: Ending | None = None
        for position, stage in enumerate(stages):
            span = 100.0 * stage.weight / total_weight
            if stage.name in done:
                percent += span
                continue
            stop = self._stop_reason(lease, deadline)
            if ending is None and stop:
                ending = self._ending_for_stop(stop)
            finalizer = ending is not None and ending.stopped_by == "budget" and stage.after_budget
            if ending is not None and not finalizer:
                by = f" by {ending.stopped_by}" if ending.stopped_by else ""
                recorder.mark(stage.name, position, "skipped", f"not run: run {ending.status}{by}")
                continue
            card.phase, card.percent, card.step, card.total_steps = stage.name, percent, None, None
            ctx = self._context(
                run,
                stage.name,
                card,
                deadline=deadline,
                percent_base=percent,
                percent_span=span,
                run_started=usage.started,
            )
            ctx.publish_card()
            manifest = recorder.start(stage.name, position)
            started = time.monotonic()
            outcome = self._run_one(stage, ctx, lease)
            usage.add_stage(stage, time.monotonic() - started, outcome.get("counters", {}))
            if lease.lost.is_set() or outcome.get("stop_reason") == FENCED:
                return Ending("lost")  # the run dir is the new attempt's: no manifest, no sync
            stage_ending = self._record_outcome(recorder, manifest, position, ctx, outcome)
            # Still the run's latest stage: the API takes exactly its outputs now.
            self._sync(run, stage_outputs(run.kind, stage.name))
            if stage_ending is not None and ending is None:
                ending = stage_ending
            percent += span
            card = ctx.card
        return ending or Ending("completed")

    def _completed_stages(self, run_id: str) -> set[str]:
        with self.publisher.transaction() as tx:
            rows = tx.session.exec(
                select(Stage.name).where(Stage.run_id == run_id, Stage.status == "completed")
            ).all()
        return set(rows)

    def _stop_reason(self, lease: Lease, deadline: float | None) -> str | None:
        if lease.cancelled.is_set():
            return "cancel"
        if self.shutdown.is_set():
            return "shutdown"
        if time.monotonic() >= self.time_up.get(lease.run_id, math.inf):
            return TIMEOUT
        if deadline is not None and time.time() >= deadline:
            return "budget"
        return None

    def _ending_for_stop(self, stop: str) -> Ending:
        if stop == "cancel":
            return Ending("cancelled", reason="cancelled on request")
        if stop == "shutdown":
            return Ending(
                "interrupted", reason="worker shut down; the run resumes on another attempt"
            )
        if stop == TIMEOUT:
            return Ending("failed", "timeout", self._timeout_reason("its stages were not run"))
        return Ending("completed", stopped_by="budget")

    def _timeout_reason(self, what: str) -> str:
        return (
            f"the attempt ran past the job timeout of {self.settings.job_timeout_s}s "
            f"(TRM_JOB_TIMEOUT_S); {what}"
        )

    def _timed_out(self, outcome: dict[str, Any], what: str) -> dict[str, Any]:
        """A stage stopped by the job timeout fails `timeout`, whatever it saved on the way."""
        reason = self._timeout_reason(what)
        return {
            **outcome,
            "ok": False,
            "failure_class": "timeout",
            "reason": reason,
            "stop_reason": None,
        }

    def _run_one(self, stage: StageDef, ctx: StageContext, lease: Lease) -> dict[str, Any]:
        if not stage.in_child:
            ctx.stop_probe = lambda: (
                FENCED if lease.lost.is_set() else self._stop_reason(lease, None)
            )
            outcome = run_stage(stage.fn, ctx)
            if outcome.get("stop_reason") == TIMEOUT:
                return self._timed_out(outcome, "the stage stopped at its next step")
            return outcome
        child = ChildStage(ctx, lease.token)
        lease.pids.append(child.start())
        signalled_at: float | None = None
        stall_s = self.settings.stall_s
        stalled = False
        while child.poll() is None:
            time.sleep(POLL_S)
            silent = time.monotonic() - lease.progress_at
            if not stalled and signalled_at is None and silent > stall_s:
                stalled = True  # alive but silent: a hang, not a slow step; it cannot save anyway
                child.kill()
            reason = "lost" if lease.lost.is_set() else self._stop_reason(lease, None)
            if reason and signalled_at is None:
                child.stop(FENCED if reason == "lost" else reason)
                signalled_at = time.monotonic()
            if (
                signalled_at is not None
                and time.monotonic() - signalled_at > self.settings.cancel_grace_s
            ):
                child.kill()
        outcome = child.outcome()
        if child.signalled == TIMEOUT:  # SIGTERM, then SIGKILL after TRM_CANCEL_GRACE_S
            return self._timed_out(outcome, "its stage process was stopped")
        if stalled:
            reason = f"no progress for {stall_s:.0f}s (no step, card or log); stage process killed"
            return {**outcome, "ok": False, "failure_class": "stalled", "reason": reason}
        return outcome

    def _record_outcome(
        self,
        recorder: StageRecorder,
        manifest: dict[str, Any],
        position: int,
        ctx: StageContext,
        outcome: dict[str, Any],
    ) -> Ending | None:
        manifest["counters"] = outcome.get("counters", {})
        manifest["notes"] = outcome.get("notes", [])
        if outcome.get("ok") and isinstance(outcome.get("result"), dict) and outcome["result"]:
            manifest["result"] = outcome["result"]
        inputs = [Path(p) for p in outcome.get("inputs", [])]
        outputs = [Path(p) for p in outcome.get("outputs", [])]
        stop = outcome.get("stop_reason")
        if stop in ("cancel", "shutdown"):
            ending = self._ending_for_stop(stop)
            klass = "cancelled" if stop == "cancel" else "interrupted"
            error = {"class": klass, "message": ending.reason}
            recorder.finish(
                manifest, position, "failed", inputs=inputs, outputs=outputs, error=error
            )
            return ending
        if not outcome.get("ok") and outcome.get("database_away"):
            ending = self._database_away()
            error = {"class": "interrupted", "message": ending.reason}
            recorder.finish(
                manifest, position, "failed", inputs=inputs, outputs=outputs, error=error
            )
            return ending
        if not outcome.get("ok"):
            error = {"class": outcome["failure_class"], "message": outcome["reason"]}
            if outcome.get("traceback"):
                error["traceback"] = outcome["traceback"]
            recorder.finish(
                manifest, position, "failed", inputs=inputs, outputs=outputs, error=error
            )
            return Ending("failed", outcome["failure_class"], f"{ctx.stage}: {outcome['reason']}")
        if stop == "budget":
            manifest["notes"].append("stopped early by the run's budget (max_seconds)")
        recorder.finish(manifest, position, "completed", inputs=inputs, outputs=outputs)
        return self._ending_for_stop("budget") if stop == "budget" else None

    def _database_away(self) -> Ending:
        """A database outage longer than TRM_DB_RETRY_S ends the attempt `interrupted`: the
        reconciler queues the next one, which resumes from the last checkpoint."""
        return Ending(
            "interrupted",
            reason=f"the database did not answer for TRM_DB_RETRY_S "
            f"({self.settings.db_retry_s:g}s); the run resumes on another attempt",
        )

    # -- dry run -------------------------------------------------------------------------------
    def _dry_run(self, run: Run) -> Ending:
        kind = KINDS[run.kind]
        recorder = StageRecorder(self.publisher, run.id, self.settings.run_dir(run.id), run.attempt)
        ctx = self._context(run, "dry_run", self._card(run))
        try:
            plans: dict[str, str] = kind.plan(ctx, run.spec) or {}
        except StageFailure as exc:
            return Ending("failed", exc.failure_class, f"dry run: {exc.reason}")
        for position, stage in enumerate(kind.stages):
            recorder.mark(stage.name, position, "planned", plans.get(stage.name))
        self._sync(run, dry_run_outputs(run.kind))
        return Ending("completed")

    # -- finish --------------------------------------------------------------------------------
    def _finish(self, run: Run, ending: Ending, usage: Usage) -> None:
        attempts = [dict(a) for a in (run.attempts or [])]
        if attempts:
            attempts[-1].update(ended_at=utcnow().isoformat(), outcome=ending.status)
        fields: dict[str, Any] = {
            "usage": usage.as_dict(),
            "attempts": attempts,
            "failure_class": ending.failure_class,
            "failure_reason": ending.reason if ending.status in ("failed", "interrupted") else None,
            "stopped_by": ending.stopped_by,
        }
        # summary.json is on disk before the terminal status is visible to anyone (SSE, webhooks).
        run_dir = self.settings.run_dir(run.id)
        summary = run_dir / SUMMARY
        try:
            write_json_atomic(summary, self._summary(run, ending, usage))
        except OSError as exc:  # a full disk must not leave the run without its end
            log.warning("run %s: %s not written: %s", run.id, SUMMARY, exc)
            if ending.status == "completed":
                ending = Ending("failed", "internal", f"could not write {SUMMARY}: {exc}")
                fields.update(failure_class="internal", failure_reason=ending.reason)
                if attempts:
                    attempts[-1]["outcome"] = "failed"
        # Uploads close with the terminal status: what the API host needs goes first.
        if upload_url(self.settings):
            skipped = [f"{s}/{MANIFEST}" for s in self._skipped_stages(run)]
            self._sync(run, (SUMMARY, *skipped))

        def record_end() -> Card:
            with self.publisher.transaction() as tx:
                fresh = tx.session.get(Run, run.id)
                assert fresh is not None
                card = self._card(fresh)
                card.status, card.phase = ending.status, fresh.phase
                card.percent = 100.0 if ending.status == "completed" else (fresh.percent or 0.0)
                card.ram_used_gb, card.ram_total_gb = measure_ram([os.getpid()])
                card.elapsed_s = usage.wall_seconds
                card.eta_s = 0.0 if ending.status == "completed" else None
                tx.emit(run.id, "card", card.model_dump())  # before the terminal status ends SSE
                if not set_status(tx, fresh, ending.status, expect_lease=run.lease_token, **fields):
                    raise _MovedOn
            return card

        try:
            card = retrying(record_end, self.settings.db_retry_s, f"end of {run.id}")
        except _MovedOn:
            log.warning("run %s moved on before %s could be recorded", run.id, ending.status)
            summary.unlink(missing_ok=True)  # the attempt that now holds the run writes its own
            return
        try:
            write_snapshot(card, run_dir)
        except OSError as exc:
            log.warning("run %s: %s not written: %s", run.id, SNAPSHOT, exc)

    def _sync(self, run: Run, paths: tuple[str, ...]) -> None:
        """Send `paths` (files or folders in the run directory) to the API host, if it is
        another host, under this attempt's upload credential."""
        credential = UploadPass(run.lease_token, run.upload_key or "")
        run_dir = self.settings.run_dir(run.id)
        files = [Path(p) for p in paths]
        sync_stage(self.settings, run.id, run_dir, files, self.publisher, credential)

    def _skipped_stages(self, run: Run) -> list[str]:
        try:
            with self.publisher.transaction() as tx:
                rows = tx.session.exec(
                    select(Stage.name).where(
                        Stage.run_id == run.id,
                        Stage.attempt == run.attempt,
                        Stage.status == "skipped",
                    )
                ).all()
        except Exception as exc:  # their manifests stay in the database (GET /runs/{id})
            log.warning("run %s: skipped stages not listed for upload: %s", run.id, exc)
            return []
        return list(rows)

    def _summary(self, run: Run, ending: Ending, usage: Usage) -> dict[str, Any]:
        with self.publisher.transaction() as tx:
            stages = tx.session.exec(
                select(Stage).where(Stage.run_id == run.id).order_by(col(Stage.position))
            ).all()
        budget = (run.spec.get("budget") or {}).get("max_seconds")
        summary = {
            "run_id": run.id,
            "kind": run.kind,
            "name": run.name,
            "status": ending.status,
            "dry_run": run.dry_run,
            "attempt": run.attempt,
            "failure_class": ending.failure_class,
            "failure_reason": ending.reason if ending.status != "completed" else None,
            "stopped_by": ending.stopped_by,
            "stages": [
                {"name": s.name, "status": s.status, "manifest": f"{s.name}/{MANIFEST}"}
                for s in stages
            ],
            "usage": usage.as_dict(),
            "finished_at": utcnow().isoformat(),
        }
        summary.update(KINDS[run.kind].summary(self.settings.run_dir(run.id)))
        if ending.stopped_by == "budget" and budget:
            summary["budget_overshoot_s"] = round(max(0.0, usage.wall_seconds - budget), 3)
        return summary
