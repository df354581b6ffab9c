"""What a stage function gets (SPEC §2: `(context, spec) -> dict`): its folders, a progress
callback that feeds the card and `metric` events, and `should_stop()` for cancel and budget.

The same object works in the worker process and in a stage's child process: `to_payload()` is
what the child is given, `from_payload()` rebuilds the context there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.card import Card, measure_ram, write_snapshot
from core.events import Publisher
from core.settings import Settings

CARD_EVERY_S = 0.25
FENCED = "fenced"  # the stop reason of an attempt whose run has moved on to a later attempt
# Never in a payload (it is a file in the run dir); a stage's child gets them in its environment.
SECRET_SETTINGS = {"api_token", "database_url", "redis_url"}


class LeaseMoved(BaseException):
    """The run's lease moved to a later attempt (this worker froze or was cut off): stop at once
    and write nothing more, since the run directory is the new attempt's now. A BaseException, so
    that stage code's `except Exception` cannot turn it into a failure and carry on writing."""


class StageFailure(Exception):
    """A failure the stage understands: it names the class (SPEC §3.1) and says what to fix."""

    def __init__(self, failure_class: str, reason: str) -> None:
        super().__init__(reason)
        self.failure_class, self.reason = failure_class, reason


@dataclass
class StageContext:
    run_id: str
    kind: str
    stage: str
    attempt: int
    run_dir: Path
    settings: Settings
    publisher: Publisher
    card: Card
    spec: dict[str, Any]
    deadline: float | None = None  # wall clock (time.time()) at which the budget runs out
    percent_base: float = 0.0
    percent_span: float = 100.0
    pids: list[int] = field(default_factory=lambda: [os.getpid()])
    stop_reason: str | None = None  # set by a signal handler or the runner
    # For stages that run inside the worker: asks the runner for cancel/shutdown as they happen.
    stop_probe: Callable[[], str | None] | None = None
    counters: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    inputs: list[Path] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)
    run_started: float = field(default_factory=time.time)  # this attempt's start, for `elapsed`
    _last_card: float = 0.0
    _first_step: tuple[int, float] | None = None
    _pass_shown: bool = False  # the last card published showed a pass that is still running

    def __post_init__(self) -> None:
        # A stage starts with nothing measured: no rate (its ETA reads "estimating", never the
        # previous stage's 00:00), no counter and no pass of the stage before.
        card = self.card
        card.eta_s = card.unit = None
        card.pass_name = card.pass_done = card.pass_total = card.pass_unit = None

    def to_payload(self) -> dict[str, Any]:
        """This context as JSON for a stage's child process, without the secret settings."""
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "stage": self.stage,
            "attempt": self.attempt,
            "run_dir": str(self.run_dir),
            "settings": self.settings.model_dump(mode="json", exclude=SECRET_SETTINGS),
            "card": self.card.model_dump(),
            "spec": self.spec,
            "deadline": self.deadline,
            "percent_base": self.percent_base,
            "percent_span": self.percent_span,
            "run_started": self.run_started,
        }

    @classmethod
    def from_payload(
        cls, payload: dict[str, Any], settings: Settings, publisher: Publisher
    ) -> StageContext:
        """The context `to_payload()` described, with the child's own settings and publisher."""
        return cls(
            run_id=payload["run_id"],
            kind=payload["kind"],
            stage=payload["stage"],
            attempt=payload["attempt"],
            run_dir=Path(payload["run_dir"]),
            settings=settings,
            publisher=publisher,
            card=Card(**payload["card"]),
            spec=payload["spec"],
            deadline=payload["deadline"],
            percent_base=payload["percent_base"],
            percent_span=payload["percent_span"],
            run_started=payload["run_started"],
        )

    @property
    def stage_dir(self) -> Path:
        path = self.run_dir / self.stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def should_stop(self) -> str | None:
        """'cancel', 'shutdown', 'budget', or None: check it at every step boundary. Raises
        LeaseMoved once the run belongs to a later attempt: nothing may be saved then."""
        reason = self.stop_reason or (self.stop_probe() if self.stop_probe else None)
        if reason == FENCED:
            raise LeaseMoved(self.run_id)
        if reason:
            return reason
        if self.deadline is not None and time.time() >= self.deadline:
            return "budget"
        return None

    def count(self, key: str, n: float = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def note(self, text: str) -> None:
        self.notes.append(text)

    def log(self, message: str, **data: Any) -> None:
        self.publisher.publish(
            self.run_id, "log", {"stage": self.stage, "message": message, **data}
        )

    def progress(
        self, step: int, total: int | None = None, unit: str | None = None, **metrics: Any
    ) -> None:
        """Report one step (`unit`: what it counts, None for a trainer's optimizer steps): a
        `metric` event always, the card at most every CARD_EVERY_S. A step ends any pass."""
        now = time.monotonic()
        if self._first_step is None:
            self._first_step = (step, now)
        clean = {k: v for k, v in metrics.items() if v is not None}
        data = {"stage": self.stage, "step": step, "total": total, **clean}
        self.publisher.publish(self.run_id, "metric", data | ({"unit": unit} if unit else {}))
        card = self.card
        card.phase, card.step, card.total_steps, card.unit = self.stage, step, total, unit
        card.status = "running"
        if "loss" in clean:
            card.loss = float(clean["loss"])
        for key in ("current_anchor", "current_train", "current_gap"):
            if key in clean:
                setattr(card, key, float(clean[key]))
        shown = self._pass_shown
        self._end_pass()
        fraction = min(1.0, step / total) if total else 0.0
        card.percent = round(self.percent_base + self.percent_span * fraction, 1)
        last = total is not None and step >= total
        if shown or last or now - self._last_card >= CARD_EVERY_S:
            self._publish_at(now)

    def pass_progress(self, name: str, done: int, total: int, unit: str = "rows") -> None:
        """Report a pass the stage runs besides its steps (a trainer's eval over its val rows):
        the card shows `<stage> <name>  done/total unit` from its start until `done` reaches
        `total`, then the stage's own step again. Its start and end are always published (one
        card each); its progress at most every CARD_EVERY_S."""
        now = time.monotonic()
        card = self.card
        starting = card.pass_name != name
        card.phase, card.status = self.stage, "running"
        card.pass_name, card.pass_done, card.pass_total, card.pass_unit = name, done, total, unit
        if done >= total:
            shown = self._pass_shown
            self._end_pass()
            if shown:
                self._publish_at(now)
        elif starting or now - self._last_card >= CARD_EVERY_S:
            self._publish_at(now)
            self._pass_shown = True

    def _end_pass(self) -> None:
        card = self.card
        card.pass_name = card.pass_done = card.pass_total = card.pass_unit = None
        self._pass_shown = False

    def _eta(self, now: float) -> float | None:
        """Seconds left in this stage at the rate of its steps so far: None ("estimating") until
        two steps gave a rate, and while a pass runs after the last step (its length is not
        known); 0 only when every step is done and nothing else runs."""
        card = self.card
        step, total = card.step, card.total_steps
        if step is None or not total or self._first_step is None:
            return None
        if step >= total:
            return None if card.pass_name else 0.0
        first_step, first_t = self._first_step
        if step <= first_step or now <= first_t:
            return None
        return (total - step) * (now - first_t) / (step - first_step)

    def _publish_at(self, now: float) -> None:
        self._last_card = now
        self.card.eta_s = self._eta(now)
        self.publish_card()

    def publish_card(self) -> None:
        card = self.card
        card.ram_used_gb, card.ram_total_gb = measure_ram(self.pids)
        card.elapsed_s = time.time() - self.run_started
        self.publisher.publish(self.run_id, "card", card.model_dump())
        write_snapshot(card, self.run_dir)
