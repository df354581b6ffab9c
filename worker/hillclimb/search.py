"""The coordinator (SPEC §8): keep `parallelism` candidates in flight, judge each as it finishes,
move along the ladder on a plateau, stop on a plateau after a move or at `max_candidates`.

It holds no state of its own: every step is recorded in the ledger first and then folded into
the state (`decide.apply`), so `run_search` on a search interrupted at any point continues where
it stood. A candidate's child run is created with the service's own idempotency key
(`core.runs.candidate_key`, a namespace no client may use), so a candidate proposed before the
interruption is found again, never created twice.

Before a candidate is proposed its corpus is built as a dry run (`screen`): a mutation that leaves
the corpus and trainer config as its parent's is recorded `not_tried` and costs no candidate, and
a candidate matching another finished one reuses that result instead of training. A candidate
that scores like the untrained model is flagged, warned about, and never kept as best.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.rundir import CANDIDATE_RESULT, CANDIDATES, write_json_atomic
from core.schemas.hillclimb import HillclimbSpec
from worker.hillclimb import decide
from worker.hillclimb.decide import SCORES, SEARCH_ROW, Candidate, Rules, SearchState
from worker.hillclimb.ladder import (
    at_rung,
    candidate_spec,
    corpus_key,
    knob_diff,
    knobs_key,
    ladder_of,
    root_knobs,
)
from worker.hillclimb.launch import Launcher, Outcome
from worker.hillclimb.ledger import Ledger
from worker.hillclimb.mutate import mutate, ranges_of
from worker.hillclimb.screen import Screen, trainer_key

POLL_S = 0.5
ROLLED_UP = ("wall_seconds", "rows_trained", "tokens_trained", "examples_scored", "tokens_scored")


def rules_of(spec: HillclimbSpec) -> Rules:
    cap = spec.max_candidates
    if spec.budget.max_candidates is not None:
        cap = min(cap, spec.budget.max_candidates)
    return Rules(
        patience=spec.patience,
        noise_margin=spec.noise_margin,
        max_generalization_gap=spec.max_generalization_gap,
        max_candidates=cap,
        parallelism=spec.parallelism,
    )


def candidate_id(index: int) -> str:
    return f"c{index:03d}"


@dataclass
class SearchRun:
    """One attempt of the coordinator. `stop` returns 'cancel', 'shutdown', 'budget', 'lost' or
    None; `on_change` sees the state after every recorded event (the card); `warn` gets what a
    person must not miss (a candidate that scores like the untrained model)."""

    spec: HillclimbSpec
    search_id: str
    run_dir: Path
    ledger: Ledger
    launcher: Launcher
    stop: Callable[[], str | None] = lambda: None
    on_change: Callable[[SearchState], None] = lambda state: None
    warn: Callable[[str], None] = lambda text: None
    poll_s: float = POLL_S
    finished_here: int = 0  # candidates this attempt saw end (the `candidates_run` counter)
    # The usage of those candidates' runs, summed (rolled up into the search's usage).
    children_usage: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rules = rules_of(self.spec)
        self.ladder = ladder_of(self.spec)
        self.ranges = ranges_of(self.spec)
        self.state = decide.replay(self.ledger.open(), self.spec.start_rung)
        self.screens: dict[str, Screen | None] = {}  # by corpus_key: one dry-run build each

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> str:
        """'completed' (the search ended), or the stop reason that interrupted it."""
        self.on_change(self.state)
        while True:
            reason = self.stop() or self.launcher.stop_reason()
            if reason in ("cancel", "shutdown", "lost"):
                if reason == "cancel":
                    self.launcher.cancel([c.run_id for c in self.state.in_flight if c.run_id])
                return reason
            self._launch_pending()
            self._collect()
            if reason == "budget" and not self.state.stopped:
                self._record(SEARCH_ROW, "stopped", status="stopped", reason="budget: max_seconds")
            self._propose()
            if not self.state.in_flight:
                if not self.state.stopped:
                    why = f"max_candidates: {self.rules.max_candidates} candidates run"
                    self._record(SEARCH_ROW, "stopped", status="stopped", reason=why)
                return "completed"
            time.sleep(self.poll_s)

    def _record(self, cid: str, event: str, **values: Any) -> None:
        row = self.ledger.record(cid, event, rung=values.pop("rung", self.state.rung), **values)
        if row is not None:
            decide.apply(self.state, row)
            self.on_change(self.state)

    # -- proposing -----------------------------------------------------------------------------
    def _propose(self) -> None:
        while (
            not self.state.stopped
            and len(self.state.in_flight) < self.rules.parallelism
            and decide.budget_left(self.state, self.rules)
        ):
            index = self.state.proposed
            picked = self._next_knobs(index)
            if picked is None:
                continue  # the neighbourhood was exhausted: a rung move or a stop was recorded
            knobs, parent = picked
            diff = knob_diff(parent.knobs, knobs) if parent else {}
            if parent is not None and parent.rung != self.state.rung:
                diff["rung"] = [parent.rung, self.state.rung]
            seed = self.spec.base.get("seed", 0)
            screen = self._screen(self.state.rung, knobs, seed)
            values = {
                "knobs": knobs,
                "knob_diff": diff,
                "parent_id": parent.candidate_id if parent else None,
                "seed": seed,
                "corpus_hash": screen.corpus_hash if screen else None,
            }
            # A knob turned on the parent's own rung that changes neither the corpus nor the
            # trainer config cannot change the result: reported, no candidate spent on it.
            if (
                parent is not None
                and screen is not None
                and "rung" not in diff
                and self._same_work(parent, screen.corpus_hash, self.state.rung, knobs, seed)
            ):
                why = self._inert(parent, diff, screen)
                nth = f"skip{len(self.state.not_tried) + 1}"
                self._record(nth, "not_tried", status="not_tried", reason=why, **values)
                continue
            cid = candidate_id(index)
            self._record(
                cid, "proposed", status="proposed", reason=self._why(parent, diff), **values
            )
            self._launch_pending()

    def _next_knobs(self, index: int) -> tuple[dict[str, Any], Candidate | None] | None:
        state = self.state
        if index == 0:
            return root_knobs(self.spec), None
        parents = state.parents(self.rules.noise_margin)
        parent = parents[index % len(parents)]
        start = parent.knobs
        if parent.rung != state.rung:
            start = at_rung(parent.knobs, self.ladder[state.rung])
            if knobs_key(state.rung, start) not in state.tried:
                return start, parent  # the first step on a new rung: the rung's effect alone
        knobs = mutate(start, self.ranges, state.rung, self.spec.seed, index, state.tried)
        if knobs is not None:
            return knobs, parent
        move, to, why = decide.rung_move(state, self.rules, "no untried neighbour of the best")
        if move == "rung":
            self._record(
                f"rung{len(state.rung_history) + 1}", "rung", rung=to, status="moved", reason=why
            )
        else:
            self._record(SEARCH_ROW, "stopped", status="stopped", reason=why)
        return None

    @staticmethod
    def _why(parent: Candidate | None, diff: dict[str, Any]) -> str:
        if parent is None:
            return "root: the base spec on the start rung"
        return f"mutation of {parent.candidate_id}: {_turned(diff) or 'nothing'}"

    # -- what a candidate would train ----------------------------------------------------------
    def _body(self, rung: int, knobs: dict[str, Any], seed: int) -> dict[str, Any]:
        return candidate_spec(self.spec, rung, knobs, name="", seed=seed)

    def _screen(self, rung: int, knobs: dict[str, Any], seed: int) -> Screen | None:
        body = self._body(rung, knobs, seed)
        key = corpus_key(body)
        if key not in self.screens:
            self.screens[key] = self.launcher.screen(body)
        return self.screens[key]

    def _same_work(
        self, other: Candidate, corpus_hash: str, rung: int, knobs: dict[str, Any], seed: int
    ) -> bool:
        """True when `other` trains (or trained) on this corpus with this trainer config."""
        if other.corpus_hash != corpus_hash:
            return False
        mine = trainer_key(self._body(rung, knobs, seed))
        return trainer_key(self._body(other.rung, other.knobs, other.seed)) == mine

    @staticmethod
    def _inert(parent: Candidate, diff: dict[str, Any], screen: Screen) -> str:
        why = (
            f"{_turned(diff)} cannot change the data: the corpus (corpus_hash "
            f"{screen.corpus_hash[:12]}) and trainer config are {parent.candidate_id}'s"
        )
        effect = screen.effect_of(list(diff))
        return f"{why} ({effect})" if effect else why

    def _twin(self, cand: Candidate, among: list[Candidate]) -> Candidate | None:
        """One of `among` that trains (or trained) exactly what `cand` would."""
        if cand.corpus_hash is None:
            return None
        for other in among:
            if other is not cand and self._same_work(
                other, cand.corpus_hash, cand.rung, cand.knobs, cand.seed
            ):
                return other
        return None

    # -- running -------------------------------------------------------------------------------
    def _launch_pending(self) -> None:
        for cand in self.state.in_flight:
            if cand.status != "proposed":
                continue
            done = [c for c in self.state.finished if c.status == "completed"]
            twin = self._twin(cand, [c for c in done if c.decision != "failed"])
            if twin is not None:
                self._reuse(cand, twin)
                continue
            training = [c for c in self.state.in_flight if c.status == "launched"]
            if self._twin(cand, training) is not None:
                continue  # the same work is training now: wait for its result and reuse it
            body = candidate_spec(
                self.spec,
                cand.rung,
                cand.knobs,
                name=f"{self.spec.name or 'hillclimb'} {self.search_id} {cand.candidate_id}",
                seed=cand.seed,
            )
            run_id = self.launcher.launch(cand.candidate_id, body)
            self._record(
                cand.candidate_id,
                "launched",
                rung=cand.rung,
                run_id=run_id,
                status="queued",
                parent_id=cand.parent_id,
            )

    def _collect(self) -> None:
        running = {c.run_id: c for c in self.state.in_flight if c.run_id}
        ended = self.launcher.poll(list(running))
        by_finish = sorted(
            ended.items(), key=lambda item: (item[1].finished_at is None, item[1].finished_at)
        )
        for run_id, outcome in by_finish:
            self._finish(running[run_id], outcome)

    def _finish(self, cand: Candidate, outcome: Outcome) -> None:
        cand.scores = dict(outcome.scores)
        decision, reason = decide.judge(self.state, cand, outcome.status, self.rules)
        if outcome.reason and decision == "failed":
            reason = f"{reason}: {outcome.reason}"
        self.finished_here += 1
        self._roll_up(outcome.usage)
        self._conclude(
            cand,
            decision,
            reason,
            run_id=cand.run_id,
            corpus_hash=outcome.corpus_hash,
            status=outcome.status,
            started_at=outcome.started_at,
            finished_at=outcome.finished_at,
        )

    def _reuse(self, cand: Candidate, twin: Candidate) -> None:
        """`cand` trains what `twin` trained: its result stands in, nothing is launched."""
        cand.scores = dict(twin.scores)
        decision, reason = decide.judge(self.state, cand, "completed", self.rules)
        now = datetime.now(UTC)
        self._conclude(
            cand,
            decision,
            f"reused {twin.candidate_id}'s result (run {twin.run_id}): same corpus_hash "
            f"{str(cand.corpus_hash)[:12]} and trainer config, not trained again; {reason}",
            run_id=twin.run_id,
            corpus_hash=cand.corpus_hash,
            status="completed",
            reused_from=twin.run_id,
            started_at=now,
            finished_at=now,
        )

    def _conclude(self, cand: Candidate, decision: str, reason: str, **values: Any) -> None:
        """Record a candidate's decision (flagging an untrained-like score), then the next move."""
        flagged = decide.untrained_like(cand, self.rules)
        measured = cand.scores.get("untrained_score") is not None
        self._record(
            cand.candidate_id,
            "finished",
            rung=cand.rung,
            parent_id=cand.parent_id,
            knobs=cand.knobs,
            seed=cand.seed,
            decision=decision,
            reason=reason,
            untrained_like=flagged if measured else None,
            **{k: v for k, v in cand.scores.items() if k in SCORES},
            **values,
        )
        if flagged:
            self.warn(untrained_warning(cand))
        self._write_result(cand)
        move = decide.next_move(self.state, self.rules)
        if move is None:
            return
        kind, to, why = move
        if kind == "rung":
            cid = f"rung{len(self.state.rung_history) + 1}"
            self._record(cid, "rung", rung=to, status="moved", reason=why)
        else:
            self._record(SEARCH_ROW, "stopped", status="stopped", reason=why)

    def _roll_up(self, usage: dict[str, Any]) -> None:
        total = self.children_usage
        for key in ROLLED_UP:
            if isinstance(usage.get(key), int | float):
                total[key] = total.get(key, 0) + usage[key]
        for device, seconds in (usage.get("device_seconds") or {}).items():
            per_device = total.setdefault("device_seconds", {})
            per_device[device] = round(per_device.get(device, 0.0) + seconds, 3)

    def _write_result(self, cand: Candidate) -> None:
        write_result(self.run_dir, cand, self.ladder[cand.rung].name)


def _turned(diff: dict[str, Any]) -> str:
    """`knob old->new, ...` for the knobs a mutation turned."""
    return ", ".join(f"{k} {a!r}->{b!r}" for k, (a, b) in diff.items())


def untrained_warning(cand: Candidate) -> str:
    return (
        f"candidate {cand.candidate_id} scores like the untrained model (anchor "
        f"{cand.anchor:.4f}, untrained {cand.scores.get('untrained_score'):.4f}): it learned "
        "nothing the anchors can see and is not kept as best"
    )


def result_record(cand: Candidate, rung_name: str) -> dict[str, Any]:
    return {
        "candidate_id": cand.candidate_id,
        "run_id": cand.run_id,
        "parent_id": cand.parent_id,
        "rung": cand.rung,
        "rung_name": rung_name,
        "knobs": cand.knobs,
        "status": cand.status,
        "decision": cand.decision,
        "corpus_hash": cand.corpus_hash,
        "untrained_like": cand.untrained_like,
        "reused_from": cand.reused_from,
        **cand.scores,
        "started_at": cand.started_at,
        "finished_at": cand.finished_at,
    }


def write_result(run_dir: Path, cand: Candidate, rung_name: str) -> None:
    write_json_atomic(
        run_dir / CANDIDATES / cand.candidate_id / CANDIDATE_RESULT, result_record(cand, rung_name)
    )
