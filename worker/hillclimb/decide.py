"""The keep rule and the ladder moves (SPEC §8), as a fold over ledger events.

The search's state is nothing but `replay(ledger rows)`: `apply` folds one event into the state,
and the live search records an event and then applies it, so an interrupted search resumed from
its ledger stands exactly where it stopped.

Events: `proposed` (knobs chosen), `launched` (its child run exists), `finished` (scores and the
decision; `reused_from` when a finished candidate's result stood in for training), `not_tried` (a
mutation that left the corpus and trainer config as the parent's: reported, never a candidate),
`rung` (the search moved a rung), `stopped` (why the search ended).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker.hillclimb.ladder import TOP_RUNG, knobs_key

SCORES = (
    "train_score",
    "anchor_score",
    "failure_rate",
    "recovery_rate",
    "generalization_gap",
    "untrained_score",  # the untrained model on the same anchors (None where not measured)
)
SEARCH_ROW = "search"  # candidate_id of the search's own events (stopped)


@dataclass(frozen=True)
class Rules:
    patience: int
    noise_margin: float
    max_generalization_gap: float
    max_candidates: int
    parallelism: int = 1


@dataclass
class Candidate:
    candidate_id: str
    rung: int
    knobs: dict[str, Any]
    parent_id: str | None
    seed: int
    index: int
    run_id: str | None = None
    status: str = "proposed"  # proposed | launched | completed | failed | cancelled
    scores: dict[str, float | None] = field(default_factory=dict)
    decision: str | None = None
    started_at: Any = None
    finished_at: Any = None
    corpus_hash: str | None = None
    untrained_like: bool = False
    reused_from: str | None = None  # the run whose result this candidate reused

    @property
    def anchor(self) -> float:
        value = self.scores.get("anchor_score")
        return float("-inf") if value is None else float(value)

    @property
    def gap(self) -> float:
        value = self.scores.get("generalization_gap")
        return float("inf") if value is None else float(value)


@dataclass
class SearchState:
    rung: int
    candidates: dict[str, Candidate] = field(default_factory=dict)
    best_id: str | None = None
    branch_ids: list[str] = field(default_factory=list)
    stale: int = 0  # non-improving decisions on the current rung since the last best or move
    failed: int = 0  # of those, failures
    moved: bool = False  # a rung move happened and no best has been found since
    stopped: str | None = None
    rung_history: list[dict[str, Any]] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)
    not_tried: list[dict[str, Any]] = field(default_factory=list)  # the `not_tried` rows

    @property
    def best(self) -> Candidate | None:
        return self.candidates.get(self.best_id) if self.best_id else None

    @property
    def in_flight(self) -> list[Candidate]:
        return [c for c in self.candidates.values() if c.status in ("proposed", "launched")]

    @property
    def finished(self) -> list[Candidate]:
        return [c for c in self.candidates.values() if c.decision is not None]

    @property
    def proposed(self) -> int:
        return len(self.candidates)

    def parents(self, noise_margin: float) -> list[Candidate]:
        """Whom the next candidate mutates: the best, then branches still within the margin."""
        best = self.best
        if best is None:
            root = self.candidates.get(next(iter(self.candidates), ""))
            return [root] if root else []
        live = [
            self.candidates[b]
            for b in self.branch_ids
            if self.candidates[b].anchor >= best.anchor - noise_margin
        ]
        return [best, *live]


def apply(state: SearchState, row: dict[str, Any]) -> None:
    """Fold one ledger event into the state."""
    event, cid = row["event"], row["candidate_id"]
    if event == "proposed":
        cand = Candidate(
            candidate_id=cid,
            rung=row["rung"],
            knobs=row["knobs"] or {},
            parent_id=row.get("parent_id"),
            seed=row.get("seed") or 0,
            index=len(state.candidates),
        )
        cand.corpus_hash = row.get("corpus_hash")
        state.candidates[cid] = cand
        state.tried.add(knobs_key(cand.rung, cand.knobs))
    elif event == "not_tried":
        state.tried.add(knobs_key(row["rung"], row["knobs"] or {}))
        state.not_tried.append(
            {k: row.get(k) for k in ("candidate_id", "parent_id", "rung", "knob_diff", "reason")}
        )
    elif event == "launched":
        cand = state.candidates[cid]
        cand.run_id, cand.status = row.get("run_id"), "launched"
    elif event == "finished":
        cand = state.candidates[cid]
        cand.status, cand.decision = row["status"], row["decision"]
        cand.scores = {key: row.get(key) for key in SCORES}
        cand.started_at, cand.finished_at = row.get("started_at"), row.get("finished_at")
        cand.run_id = row.get("run_id") or cand.run_id
        cand.corpus_hash = row.get("corpus_hash") or cand.corpus_hash
        cand.untrained_like = bool(row.get("untrained_like"))
        cand.reused_from = row.get("reused_from")
        if cand.decision == "best":
            state.best_id, state.stale, state.failed, state.moved = cid, 0, 0, False
            return
        if cand.decision == "branch":
            state.branch_ids.append(cid)
        if cand.rung == state.rung:
            state.stale += 1
            state.failed += cand.decision == "failed"
    elif event == "rung":
        state.rung_history.append(
            {"from": state.rung, "to": row["rung"], "reason": row.get("reason"), "at": cid}
        )
        state.rung, state.stale, state.failed, state.moved = row["rung"], 0, 0, True
    elif event == "stopped":
        state.stopped = row.get("reason") or "stopped"


def replay(rows: list[dict[str, Any]], start_rung: int) -> SearchState:
    state = SearchState(rung=start_rung)
    for row in rows:
        apply(state, row)
    return state


def judge(state: SearchState, cand: Candidate, status: str, rules: Rules) -> tuple[str, str]:
    """(decision, reason) for a finished candidate: best | branch | discard | failed."""
    if status != "completed":
        return "failed", f"candidate run {status}"
    if cand.scores.get("anchor_score") is None:
        return "failed", "no anchor score in the candidate's scorecard"
    if untrained_like(cand, rules):
        untrained = cand.scores["untrained_score"]
        return "discard", (
            f"scores like the untrained model: anchor {cand.anchor:.4f} vs untrained "
            f"{untrained:.4f}, not better by more than the noise margin {rules.noise_margin:.3f}"
        )
    gap, ceiling = cand.gap, rules.max_generalization_gap
    if gap > ceiling:
        return "discard", f"gap {gap:.3f} over the ceiling {ceiling:.3f}"
    best = state.best
    if best is None:
        return "best", "first candidate within the gap ceiling"
    delta = cand.anchor - best.anchor
    if delta > rules.noise_margin:
        return "best", f"anchor {cand.anchor:.3f} beats {best.anchor:.3f} by {delta:+.3f}"
    if abs(delta) <= rules.noise_margin:
        promising = _promising(cand, best)
        if promising:
            return "branch", f"near tie ({delta:+.3f}) with {promising}"
        return "discard", f"anchor {delta:+.3f} within the noise margin {rules.noise_margin:.3f}"
    return "discard", f"anchor {cand.anchor:.3f} below best {best.anchor:.3f}"


def untrained_like(cand: Candidate, rules: Rules) -> bool:
    """No better on the anchors than the untrained model by more than the noise margin: the
    training taught it nothing the anchors can see (an exact tie is the usual sign)."""
    untrained = cand.scores.get("untrained_score")
    if untrained is None or cand.scores.get("anchor_score") is None:
        return False
    return cand.anchor <= untrained + rules.noise_margin + 1e-9


def _promising(cand: Candidate, best: Candidate) -> str | None:
    """What a near tie does better than the best: a smaller gap, fewer failures, more recovery."""
    if cand.gap < best.gap - 1e-9:
        return f"a smaller gap ({cand.gap:.3f} < {best.gap:.3f})"
    for key, better in (("failure_rate", -1), ("recovery_rate", 1)):
        mine, theirs = cand.scores.get(key), best.scores.get(key)
        if mine is not None and theirs is not None and (mine - theirs) * better > 1e-9:
            return f"a better {key} ({mine:.3f} vs {theirs:.3f})"
    return None


def next_move(state: SearchState, rules: Rules) -> tuple[str, int | None, str] | None:
    """After a decision: ("rung", to, why), ("stop", None, why) or None (keep climbing)."""
    if state.stopped:
        return None
    if state.stale >= rules.patience:
        return rung_move(state, rules, f"{state.stale} candidates without a new best")
    return None


def rung_move(state: SearchState, rules: Rules, why: str) -> tuple[str, int | None, str]:
    """Down when candidates keep failing, up when the best's gap is small, else down; after a
    move that found nothing better, stop instead."""
    if state.moved:
        return "stop", None, f"plateau: {why} after a rung move"
    best = state.best
    if state.failed * 2 >= max(state.stale, 1) and state.failed:
        direction, because = -1, f"{state.failed} of them failed"
    elif best is not None and best.gap <= rules.max_generalization_gap / 2:
        direction, because = 1, f"best gap {best.gap:.3f} is small"
    else:
        direction, because = -1, "the gap is not small"
    to = state.rung + direction
    if not 0 <= to <= TOP_RUNG:
        to = state.rung - direction
        because += "; the ladder ends there, so the other way"
    return "rung", to, f"{why}; {because}"


def budget_left(state: SearchState, rules: Rules) -> bool:
    return state.proposed < rules.max_candidates
