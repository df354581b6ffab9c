"""The `hillclimb` kind (SPEC §3.2, §8): `plan`, `search` (the coordinator; inline on the `cpu`
queue, it mostly waits on its child `train` runs) and `finalize` (also after a budget stop);
`plan_dry` is its dry run. The search logic itself is in worker/hillclimb/.

Files: `plan.json`, `hillclimb_ledger.jsonl`, `candidates/<id>/result.json`, `best/` (the best
candidate's small files and a pointer to its run), `search_summary.json` (with the mutations not
tried, the results reused, and the candidates that scored like the untrained model).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.card import show_best
from core.errors import ApiError
from core.paths import under
from core.promotion import promote_search_best
from core.rundir import (
    BEST,
    BEST_POINTER,
    CORPUS,
    LEDGER,
    MANIFEST,
    SCORECARD,
    SEARCH_PLAN,
    SEARCH_SUMMARY,
    SUMMARY,
    TRAINER,
    TRAINER_CONFIG,
    write_json_atomic,
)
from core.runs import validate_spec
from core.schemas.hillclimb import HillclimbSpec, PromoteBest
from worker.context import FENCED, StageContext, StageFailure
from worker.hillclimb import decide
from worker.hillclimb.decide import Candidate, SearchState
from worker.hillclimb.ladder import candidate_spec, ladder_of, root_knobs, rung_label
from worker.hillclimb.launch import ServiceLauncher
from worker.hillclimb.ledger import Ledger
from worker.hillclimb.mutate import ranges_of
from worker.hillclimb.search import (
    SearchRun,
    result_record,
    rules_of,
    untrained_warning,
    write_result,
)
from worker.kinds.base import Kind, StageDef

SHORT_RUNG = {
    "in_domain": "in_domain",
    "light_generalization": "light_gen",
    "cross_run": "cross_run",
    "cross_env_family": "cross_env",
    "broad_generalization": "broad_gen",
    "hardest_setting": "hardest",
}
# What `best/` copies from the best candidate's run (small files; the model stays in its run).
BEST_FILES = (
    SCORECARD,
    TRAINER_CONFIG,
    f"{CORPUS}/{MANIFEST}",
    SUMMARY,
    f"{TRAINER}/config.json",
    f"{TRAINER}/run_meta.json",
)


def _spec(spec: dict[str, Any]) -> HillclimbSpec:
    try:
        return HillclimbSpec.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StageFailure("bad_input", f"{where}: {first['msg']}") from None


def _plan(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    search = _spec(spec)
    ladder = ladder_of(search)
    root = root_knobs(search)
    plan = {
        "search_id": ctx.run_id,
        "rules": rules_of(search).__dict__,
        "start_rung": search.start_rung,
        "ladder": [{"rung": i, **rung.model_dump()} for i, rung in enumerate(ladder)],
        "anchors": search.anchors,
        "knob_ranges": ranges_of(search),
        "root_knobs": root,
        "root_spec": candidate_spec(search, search.start_rung, root, "root", search.base["seed"]),
    }
    write_json_atomic(ctx.run_dir / SEARCH_PLAN, plan)
    ctx.outputs.append(ctx.run_dir / SEARCH_PLAN)
    return plan


def plan(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    """Validate the search, check that its root candidate is a run this server takes, write
    plan.json."""
    planned = _plan(ctx, spec)
    try:
        validate_spec(planned["root_spec"], ctx.settings)
    except ApiError as exc:
        raise StageFailure("bad_input", f"the candidates' train spec: {exc.message}") from None
    search = _spec(spec)
    ctx.card.total_candidates = rules_of(search).max_candidates
    ctx.card.completed_count = 0
    return {
        "max_candidates": planned["rules"]["max_candidates"],
        "start_rung": rung_label(search.start_rung, ladder_of(search)),
        "knobs_turned": sorted(planned["knob_ranges"]),
    }


def plan_dry(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    """The dry-run planner: plan.json with the root candidate's spec, nothing launched."""
    planned = _plan(ctx, spec)
    rules = planned["rules"]
    return {
        "plan": f"{SEARCH_PLAN} written: root on rung {planned['start_rung']}, "
        f"knobs {', '.join(sorted(planned['knob_ranges'])) or 'none'}",
        "search": f"would run up to {rules['max_candidates']} candidates, "
        f"{rules['parallelism']} at a time",
        "finalize": f"would write {SEARCH_SUMMARY} and {BEST}/",
    }


class SearchCard:
    """The search's card: candidate i/N, composite ETA from finished candidates, current and best
    anchor/train/gap, and the rung in the phase line."""

    def __init__(self, ctx: StageContext, search: HillclimbSpec) -> None:
        self.ctx, self.search = ctx, search
        self.rules, self.ladder = rules_of(search), ladder_of(search)
        self.sources = ",".join(s["name"] for s in search.base["corpus"]["sources"])

    def __call__(self, state: SearchState) -> None:
        card = self.ctx.card
        done = state.finished
        total = self.rules.max_candidates
        # The card's phase column is 21 wide: "search r4 broad_gen".
        card.phase = f"search r{state.rung} {SHORT_RUNG.get(self.ladder[state.rung].name, '')}"
        card.data_source = self.sources
        card.total_candidates = total
        card.completed_count = len(done)
        flying = state.in_flight
        card.candidate = (
            flying[-1].candidate_id if flying else (done[-1].candidate_id if done else None)
        )
        card.step, card.total_steps = len(done), total
        if done:
            last = done[-1]
            card.current_anchor = last.scores.get("anchor_score")
            card.current_train = last.scores.get("train_score")
            card.current_gap = last.scores.get("generalization_gap")
        best = state.best
        if best is not None:
            show_best(card, best.scores)
            card.best_candidate = best.candidate_id
        card.eta_s = self._eta(state, total)
        fraction = 1.0 if state.stopped and not flying else min(1.0, len(done) / total)
        card.percent = round(self.ctx.percent_base + self.ctx.percent_span * fraction, 1)
        self.ctx.publish_card()

    def _eta(self, state: SearchState, total: int) -> float | None:
        """Mean candidate time x candidates left / parallelism; unknown before one finished."""
        trained = [c for c in state.finished if not c.reused_from]
        spans = [_seconds(c.started_at, c.finished_at) for c in trained]
        durations = [d for d in spans if d is not None]
        if not durations:
            return None
        left = len(state.in_flight) if state.stopped else max(0, total - len(state.finished))
        # A reused result costs nothing: the mean is over trained candidates only.
        return sum(durations) / len(durations) * left / max(1, self.rules.parallelism)


def _seconds(start: Any, end: Any) -> float | None:
    if not start or not end:
        return None
    a = start if isinstance(start, datetime) else datetime.fromisoformat(str(start))
    b = end if isinstance(end, datetime) else datetime.fromisoformat(str(end))
    return max(0.0, (b - a).total_seconds())


def _warn(ctx: StageContext) -> Callable[[str], None]:
    """A warning a person must see: on the stage's notes and as a `log` event, as it happens."""

    def warn(text: str) -> None:
        ctx.note(text)
        ctx.log(text, level="warning")

    return warn


def search(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    search_spec = _spec(spec)
    ledger = Ledger(ctx.publisher, ctx.run_id, ctx.run_dir)
    coordinator = SearchRun(
        spec=search_spec,
        search_id=ctx.run_id,
        run_dir=ctx.run_dir,
        ledger=ledger,
        launcher=ServiceLauncher(ctx.publisher, ctx.settings, ctx.run_id),
        stop=ctx.should_stop,
        on_change=SearchCard(ctx, search_spec),
        warn=_warn(ctx),
    )
    outcome = coordinator.run()
    ctx.count("candidates_run", coordinator.finished_here)
    # Work counters of the children add into the search's usage (the runner sums counters);
    # their device seconds are reported in the stage result, the runner does not roll those up.
    children = coordinator.children_usage
    for key in ("rows_trained", "tokens_trained", "examples_scored", "tokens_scored"):
        if children.get(key):
            ctx.count(key, children[key])
    ctx.outputs.append(ledger.path)
    if outcome in ("cancel", "shutdown"):
        ctx.stop_reason = outcome
    elif outcome == "lost":  # the search moved to a later attempt: its child writes nothing more
        ctx.stop_reason = FENCED
    state = coordinator.state
    best = state.best
    return {
        "candidates": state.proposed,
        "finished": len(state.finished),
        "best_candidate": best.candidate_id if best else None,
        "rung": state.rung,
        "stopped": state.stopped,
        "children_usage": children,
    }


def finalize(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    search_spec = _spec(spec)
    ladder = ladder_of(search_spec)
    ledger = Ledger(ctx.publisher, ctx.run_id, ctx.run_dir)
    state = decide.replay(ledger.open(), search_spec.start_rung)
    for cand in state.finished:
        write_result(ctx.run_dir, cand, ladder[cand.rung].name)
    best, root = state.best, state.candidates.get("c000")
    untrained = [c for c in state.finished if c.untrained_like]
    warnings = [untrained_warning(c) for c in untrained]
    for text in warnings:
        ctx.note(text)
    if best is not None and best.run_id:
        _copy_best(ctx, best.run_id, result_record(best, ladder[best.rung].name))
    summary = {
        "search_id": ctx.run_id,
        "best_candidate": best.candidate_id if best else None,
        "best_run": best.run_id if best else None,
        "root_candidate": root.candidate_id if root else None,
        "root_candidate_run": root.run_id if root else None,
        "best_scores": best.scores if best else None,
        "root_scores": root.scores if root else None,
        "best_knobs": best.knobs if best else None,
        "best_rung": best.rung if best else None,
        "candidates": state.proposed,
        "finished": len(state.finished),
        "decisions": {
            d: sum(1 for c in state.finished if c.decision == d)
            for d in ("best", "branch", "discard", "failed")
        },
        "rung": state.rung,
        "rung_history": state.rung_history,
        "not_tried": state.not_tried,
        "reused": {c.candidate_id: c.reused_from for c in state.finished if c.reused_from},
        "untrained_like": [c.candidate_id for c in untrained],
        "warnings": warnings,
        "stopped": state.stopped,
        "ledger": LEDGER,
        "best_dir": BEST if best else None,
    }
    if search_spec.promote is not None:
        summary["promotion"] = _promote_best(ctx, search_spec.promote, best)
    write_json_atomic(ctx.run_dir / SEARCH_SUMMARY, summary)
    ctx.outputs.append(ctx.run_dir / SEARCH_SUMMARY)
    if best is None:
        ctx.note(
            "no candidate met the keep rule (completed, within the gap ceiling, better than "
            "the untrained model)"
        )
    return {k: summary[k] for k in ("best_candidate", "best_run", "root_candidate_run", "stopped")}


def _promote_best(ctx: StageContext, asked: PromoteBest, best: Candidate | None) -> dict[str, Any]:
    """The spec's `promote`: the best candidate as the name's next live version, unless there is
    none or it scores under `min_anchor_score`. A refusal is said (an event and the summary's
    `promotion`), never a failed search: the search's results stand either way."""
    reason = _not_promoted(asked, best)
    if reason is None and best is not None and best.run_id:
        try:
            best_of = (best.run_id, best.candidate_id)
            made = promote_search_best(
                ctx.publisher.engine, ctx.settings, ctx.run_id, best_of, asked
            )
        except ApiError as refused:
            reason = refused.message
        else:
            ctx.log(
                f"promoted {best.candidate_id} (run {best.run_id}) as "
                f"{made.name}@{made.version}, now live"
            )
            return {
                "promoted": True,
                "name": made.name,
                "version": made.version,
                "run_id": made.run_id,
                "candidate": best.candidate_id,
            }
    text = f"not promoted as {asked.name}: {reason}"
    ctx.note(text)
    ctx.log(text)
    return {"promoted": False, "name": asked.name, "reason": reason}


def _not_promoted(asked: PromoteBest, best: Candidate | None) -> str | None:
    """Why the search's best is not promoted before the registry is asked, or None."""
    if best is None or not best.run_id:
        return "no candidate met the keep rule"
    score, floor = best.scores.get("anchor_score"), asked.min_anchor_score
    if floor is not None and (score is None or score < floor):
        return f"the best anchor score {score} is under min_anchor_score {floor}"
    return None


def _copy_best(ctx: StageContext, run_id: str, record: dict[str, Any]) -> None:
    source = ctx.settings.run_dir(run_id)
    target = ctx.run_dir / BEST
    copied = []
    for rel in BEST_FILES:
        path = source / rel
        # A copy follows symlinks: only what resolves inside the candidate's own run directory.
        if path.is_file() and under(source, path):
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / rel)
            copied.append(rel)
    pointer = {
        **record,
        "run_dir": str(source),
        "model_dir": str(source / TRAINER),
        "copied": copied,
    }
    write_json_atomic(target / BEST_POINTER, pointer)
    ctx.outputs.append(Path(target / BEST_POINTER))


def search_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json's `search`: the search's own summary, once `finalize` wrote it."""
    path = run_dir / SEARCH_SUMMARY
    if not path.is_file() or not under(run_dir, path):
        return {}
    try:
        search = json.loads(path.read_text())
    except (OSError, ValueError):  # not the file finalize wrote: leave it out of the summary
        return {}
    return {"search": search} if isinstance(search, dict) else {}


STAGES = (
    StageDef("plan", plan),
    # The coordinator: one child `train` run per candidate, on any worker.
    StageDef("search", search, weight=20),
    StageDef("finalize", finalize, after_budget=True),
)
KIND = Kind("hillclimb", STAGES, plan_dry, summary=search_summary)
