"""The small object through which a trainer talks to the service (STYLE: no inheritance chains).

A trainer calls `on_step` after every optimizer step, `should_stop()` at every step boundary
(cancel, worker shutdown, or budget: save a checkpoint and return), `on_pass` as a pass besides
the steps goes (an eval over the val rows: from 0 rows to its total, which ends it), `on_eval`
after each eval, and `on_checkpoint` after saving. `StageCallbacks` feeds these into the run's
card and events; tests and benchmarks can pass a plain `TrainerCallbacks()` that records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.rundir import folder_digest
from worker.context import StageContext


@dataclass
class TrainerCallbacks:
    steps: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None

    def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
        self.steps.append({"step": step, "total": total, **metrics})

    def on_pass(self, name: str, done: int, total: int, unit: str = "rows") -> None:
        return None

    def on_eval(self, step: int, **metrics: Any) -> None:
        self.evals.append({"step": step, **metrics})

    def on_checkpoint(self, step: int, path: Path) -> None:
        return None

    def should_stop(self) -> str | None:
        return self.stop_reason

    def trusts(self, checkpoint: Path) -> bool:
        """Whether to resume from `checkpoint`: a direct call owns its folder."""
        return True


class StageCallbacks(TrainerCallbacks):
    """Callbacks bound to a running stage: every step becomes a `metric` event and the card."""

    def __init__(self, ctx: StageContext) -> None:
        super().__init__()
        self.ctx = ctx

    def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
        self.ctx.progress(step, total, **metrics)

    def on_pass(self, name: str, done: int, total: int, unit: str = "rows") -> None:
        self.ctx.pass_progress(name, done, total, unit)

    def on_eval(self, step: int, **metrics: Any) -> None:
        self.ctx.publisher.publish(
            self.ctx.run_id, "metric", {"stage": self.ctx.stage, "step": step, "eval": metrics}
        )

    def on_checkpoint(self, step: int, path: Path) -> None:
        record = {"folder": path.name, "sha256": folder_digest(path)}
        self.ctx.log(f"checkpoint at step {step}", step=step, path=str(path), checkpoint=record)

    def should_stop(self) -> str | None:
        return self.ctx.should_stop()

    def trusts(self, checkpoint: Path) -> bool:
        """Only a checkpoint an attempt of this run saved: its folder's digest is among those the
        run's own events recorded (the worker writes events; a client can upload files, never
        events). Anything else is passed over, and the stage's notes say so."""
        recorded = {
            (data.get("checkpoint") or {}).get("sha256")
            for data in self.ctx.publisher.run_events(self.ctx.run_id, "log")
            if data.get("stage") == self.ctx.stage and isinstance(data.get("checkpoint"), dict)
        }
        if folder_digest(checkpoint) in recorded:
            return True
        self.ctx.note(
            f"{checkpoint.name}: not a checkpoint this run saved (its digest is in no record of "
            "the run); not resumed from it"
        )
        return False
