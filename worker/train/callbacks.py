"""The small object through which a trainer talks to the service (STYLE: no inheritance chains).

A trainer calls `on_step` after every optimizer step, `should_stop()` at every step boundary
(cancel, worker shutdown, or budget: save a checkpoint and return), `on_pass` as a pass besides
the steps goes (an eval over the val rows: from 0 rows to its total, which ends it), `on_eval`
after each eval, and `on_checkpoint` after saving. `StageCallbacks` feeds these into the run's
card and events; tests and benchmarks can pass a plain `TrainerCallbacks()` that records nothing.
`BudgetCallbacks` (a train run's) also holds the run to its budget and to TRM_MAX_SECONDS, and
fails a run whose loss is no longer a number.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.rundir import folder_digest
from worker.context import StageContext, StageFailure


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


class BudgetCallbacks(StageCallbacks):
    """Stage callbacks that also stop at the spec's `max_tokens` (the trainer reports its running
    `tokens_trained` with each step); `max_seconds` is the context's deadline.

    Two refusals as the steps go, both `bad_input` naming the knob to lower: a loss that is no
    longer a number (the run diverged: `lr` names the learning rate knob and its value), and,
    for a run without a budget, a measured step time x the steps left that would take the run
    past TRM_MAX_SECONDS (the estimate before training is a lower bound; this one is measured
    on this worker, from the second step on so that start-up is not counted)."""

    def __init__(
        self,
        ctx: StageContext,
        max_tokens: int | None,
        lr: str = "the learning rate",
        steps_formula: str = "",
    ) -> None:
        super().__init__(ctx)
        self.max_tokens, self.tokens = max_tokens, 0
        self.lr, self.steps_formula = lr, steps_formula
        self.started = time.monotonic()
        self.first: tuple[int, float] | None = None  # (step, when) of the first step reported

    def on_step(self, step: int, total: int | None, **metrics: Any) -> None:
        loss = metrics.get("loss")
        if isinstance(loss, int | float) and not math.isfinite(loss):
            raise StageFailure(
                "bad_input",
                f"training diverged: the loss became {loss} at step {step}; lower {self.lr}",
            )
        self.tokens = int(metrics.get("tokens_trained", self.tokens))
        self._check_pace(step, total)
        super().on_step(step, total, **metrics)

    def _check_pace(self, step: int, total: int | None) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = (step, now)
            return
        if not total or self.ctx.deadline is not None:  # a budget stops the run in time
            return
        first_step, first_at = self.first
        per_step = (now - first_at) / max(step - first_step, 1)
        projected = (now - self.started) + per_step * (total - step)
        limit = self.ctx.settings.max_seconds
        if projected > limit:
            raise StageFailure(
                "bad_input",
                f"at {per_step:.3g} s a step measured here, {total} steps "
                f"({self.steps_formula or 'the run'}) would take about {projected:.0f} s, over "
                f"this server's limit of {limit} s (TRM_MAX_SECONDS); lower the steps, the "
                "model's size, or set budget.max_seconds",
            )

    def should_stop(self) -> str | None:
        if self.max_tokens and self.tokens >= self.max_tokens:
            return "budget"
        return super().should_stop()
