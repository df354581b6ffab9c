"""kill -9 in the middle of a `qlora` run: it resumes from its newest checkpoint on another worker.
The base model is the session's tiny Llama (two layers, SmolLM2's tokenizer): what is checked is
the resume (steps, optimizer state, rows), which a model's size does not change, and SmolLM2's
steps made this a minute of both test cores. (The hill-climb coordinator's kill -9 is
test_coordinator_kill.py.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.helpers import read_json, stored_events
from tests.train.qlora_fixtures import TINY_LLAMA, model_cache  # noqa: F401

# ruff: noqa: F811 (the imported model_cache fixture is named as an argument)

# The workers find the tiny Llama in the session's model cache (tests/train/qlora_fixtures.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STEPS, EVERY = 120, 10  # the trainer's steps, and a checkpoint every EVERY of them


def route_play(data_dir: Path) -> None:
    from worker.envs import generate

    # ~260 train rows: STEPS steps of micro-batch 2 within the one epoch
    generate(data_dir / "play", families=["route"], worlds=3, episodes=48, seed=0)


@pytest.fixture
def env(env: dict[str, str], model_cache: Path) -> dict[str, str]:
    """The workers' MODEL_CACHE is the session's, holding the tiny Llama (and SmolLM2, converted
    once, whose tokenizer it has)."""
    return {**env, "TRM_MODEL_CACHE": str(model_cache)}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_qlora_kill9_resumes_from_the_newest_checkpoint(
    service: Service, settings: Settings
) -> None:
    """The run's training resumes on worker-b where worker-a's last checkpoint left it: steps
    count on, the optimizer's state comes back. (The `evaluate` stage that follows is not what
    this case is about: the run is cancelled once the trainer is done, or may have completed.)"""
    route_play(settings.data_dir)
    spec = {
        "kind": "train",
        "trainer": "qlora",
        "corpus": {
            "sources": [{"type": "trm_play_root", "name": "route", "path": "play"}],
            "contract": "action_only",
        },
        "qlora": {
            "base_model": TINY_LLAMA,
            # A tiny Llama's step is tens of milliseconds: steps enough that the trainer is far
            # from done when the kill lands after the first checkpoint.
            "max_steps": STEPS,
            "checkpoint_every": EVERY,
            "micro_batch": 2,
            "grad_accum": 1,
            "max_seq_len": 128,  # route rows are ~370 tokens: each keeps its answer and end
            "eval_every": STEPS,
            "eval_rows": 0,  # no val loss: the trainer's evals are not what this case is about
            "r": 4,
        },
    }
    # One thread per trainer: on a busy 2-core box, OpenMP's spinning threads made a step 3-5x
    # slower than one thread.
    service.env["OMP_NUM_THREADS"] = "1"
    first = service.start_worker("worker-a")
    run = service.submit(spec)
    run_dir = settings.runs_dir / run["id"]

    def newest_checkpoint() -> int:
        """The newest checkpoint the run recorded (a folder on disk whose record the kill cut
        off is passed over on resume, as any folder the run did not record)."""
        recorded = [
            e["data"]["step"]
            for e in stored_events(settings, run["id"])
            if e["type"] == "log" and isinstance(e["data"].get("checkpoint"), dict)
        ]
        return max(recorded, default=0)

    # Kill once the first checkpoint is saved and recorded (a kill in the middle of a later
    # save is fine: a checkpoint folder appears whole, by one rename, or not at all).
    wait_for(lambda: newest_checkpoint() >= EVERY, timeout=600, what="the first checkpoint")
    service.start_worker("worker-b")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    newest_at_kill = newest_checkpoint()

    manifest = run_dir / "launch_trainer" / "manifest.json"

    def trainer_done_on_attempt_2() -> bool:
        found = read_json(manifest) if manifest.exists() else {}
        return found.get("attempt") == 2 and found.get("status") in ("completed", "failed")

    wait_for(trainer_done_on_attempt_2, timeout=600, what="attempt 2's launch_trainer")
    trainer = read_json(manifest)
    assert trainer["status"] == "completed", trainer["error"]
    resumed = trainer["counters"].get("resumed_from_step")
    # The newest checkpoint on disk at the kill (one more may land while the trainer dies).
    assert resumed in (newest_at_kill, newest_at_kill + EVERY), trainer["counters"]
    assert EVERY <= resumed < STEPS, trainer["counters"]
    assert f"resumed from the checkpoint at step {resumed}" in trainer["notes"]
    result = trainer["result"]
    assert result["steps"] == STEPS and result["optimizer_state_step"] == STEPS  # Adam's count
    assert result["rows_trained"] == STEPS * 2  # rows trained in all, both attempts
    events = stored_events(settings, run["id"])
    steps = [
        e["data"]["step"]
        for e in events[events.index(attempt_started(events, 2)) :]
        if e["type"] == "metric"
        and e["data"].get("stage") == "launch_trainer"
        and "loss" in e["data"]
    ]
    assert steps == list(range(resumed + 1, STEPS + 1)), "attempt 2 counts on from its checkpoint"

    cancel = service.http.post(f"/runs/{run['id']}/cancel")
    assert cancel.status_code in (202, 409), cancel.text  # 409: the tiny model's evaluate ended
    done = service.wait_status(run["id"], "cancelled", "completed", "failed", timeout=120)
    assert [a["worker_id"] for a in done["attempts"]] == ["worker-a", "worker-b"]
    assert done["attempts"][0]["outcome"] == "interrupted"
    assert done["status"] in ("cancelled", "completed"), done


def attempt_started(events: list[dict[str, Any]], attempt: int) -> dict[str, Any]:
    return next(
        e
        for e in events
        if e["type"] == "status"
        and e["data"]["status"] == "running"
        and e["data"]["attempt"] == attempt
    )
