"""The `selftest` kind: proves a worker end to end without a GPU or data. A CPU loop in a child
process that reports every step, checkpoints, resumes from its checkpoint on a later attempt,
honours cancel and budget at step boundaries, and can be told to fail at a given step. Its dry
run writes the spec it would run to `spec.resolved.json`."""

from __future__ import annotations

import json
import time
from typing import Any

from core.rundir import (
    SELFTEST_CHECKPOINT,
    SELFTEST_PLAN,
    SELFTEST_RESULT,
    SPEC_RESOLVED,
    write_json_atomic,
)
from worker.context import StageContext
from worker.kinds.base import Kind, StageDef

# In the stage folders: prepare/plan.json, loop/checkpoint.json, loop/result.json.


def prepare(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    plan = {"steps": spec["steps"], "step_seconds": spec["step_seconds"]}
    path = ctx.stage_dir / SELFTEST_PLAN
    write_json_atomic(path, plan)
    ctx.outputs.append(path)
    return plan


def _burn(seconds: float) -> float:
    """Real CPU work for about `seconds` (not a sleep: the worker's RSS and CPU are real)."""
    end, acc, x = time.monotonic() + seconds, 0.0, 1.0
    while time.monotonic() < end:
        for _ in range(2000):
            x = (x * 1.000001) % 7.0
            acc += x
    return acc


def loop(ctx: StageContext, spec: dict[str, Any]) -> dict[str, Any]:
    checkpoint = ctx.stage_dir / SELFTEST_CHECKPOINT
    start = json.loads(checkpoint.read_text())["step"] if checkpoint.exists() else 0
    if start:
        ctx.note(f"resumed from checkpoint at step {start}")
    ctx.counters["resumed_from_step"] = start
    ctx.counters.setdefault("steps_run", 0)  # said even when a stop comes before the first step
    steps, every = spec["steps"], spec["checkpoint_every"]
    step = start
    while step < steps:
        reason = ctx.should_stop()
        if reason:
            write_json_atomic(checkpoint, {"step": step})
            ctx.note(f"stopped by {reason} after step {step}; checkpoint saved")
            break
        _burn(spec["step_seconds"])
        step += 1
        if spec.get("fail_at_step") == step:
            raise RuntimeError(f"selftest asked to fail at step {step}")
        if step % every == 0 or step == steps:
            write_json_atomic(checkpoint, {"step": step})
        ctx.count("steps_run")
        ctx.progress(step, steps, loss=round(1.0 / step, 6))
        while spec.get("stall_at_step") == step:  # a hang: alive, silent, deaf to should_stop
            time.sleep(1.0)
    result = {"final_step": step, "steps": steps}
    out = ctx.stage_dir / SELFTEST_RESULT
    write_json_atomic(out, result)
    ctx.outputs.extend([out, checkpoint])
    return result


def plan(ctx: StageContext, spec: dict[str, Any]) -> dict[str, str]:
    """The dry run: the spec it would run, in spec.resolved.json."""
    write_json_atomic(ctx.run_dir / SPEC_RESOLVED, spec)
    return {s.name: "would run" for s in STAGES}


STAGES = (
    StageDef("prepare", prepare),
    StageDef("loop", loop, in_child=True, weight=8),
)
KIND = Kind("selftest", STAGES, plan)
