"""kill -9 in the middle of the heavy kinds (slow: minutes on a CPU): a `qlora` run resumes from
its newest checkpoint on another worker; a hill-climb coordinator resumes with no duplicate ledger
row and no candidate run twice."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.conftest import Service, wait_for
from tests.fault.helpers import read_json, steps_after_attempt, stored_events
from worker.kinds import missing_stages

# Not in CI yet: both fail on this 2-core box as of this commit (see docs/reliability.md and the
# closing note); scripts/reliability_report.py --slow runs them.
pytestmark = [pytest.mark.slow, pytest.mark.soak]


def route_play(data_dir: Path) -> None:
    from worker.envs import generate

    generate(data_dir / "play", families=["route"], worlds=3, episodes=4, seed=0)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    kept = os.environ.get("TRM_TEST_MODEL_CACHE")  # a converted SmolLM2 to reuse, if any
    return {**env, "TRM_MODEL_CACHE": kept} if kept else env


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_qlora_kill9_resumes_from_the_newest_checkpoint(
    service: Service, settings: Settings
) -> None:
    route_play(settings.data_dir)
    spec = {
        "kind": "train",
        "trainer": "qlora",
        "corpus": {
            "sources": [{"type": "trm_play_root", "name": "route", "path": "play"}],
            "contract": "action_only",
        },
        "qlora": {
            "max_steps": 12,
            "checkpoint_every": 2,
            "micro_batch": 2,
            "grad_accum": 1,
            "max_seq_len": 256,
            "eval_every": 100,
            "r": 4,
        },
    }
    first = service.start_worker("worker-a")
    run = service.submit(spec)

    def trained_steps() -> int:
        card = service.run(run["id"])["card"] or {}
        return int(card.get("step") or 0) if card.get("phase") == "launch_trainer" else 0

    wait_for(lambda: trained_steps() >= 5, timeout=900, what="five qlora steps")
    service.start_worker("worker-b")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    done = service.wait_status(run["id"], "completed", "failed", timeout=900)
    assert done["status"] == "completed", done
    assert [(a["worker_id"], a["outcome"]) for a in done["attempts"]] == [
        ("worker-a", "interrupted"),
        ("worker-b", "completed"),
    ]
    trainer = read_json(settings.runs_dir / run["id"] / "launch_trainer" / "manifest.json")
    resumed = trainer["counters"].get("resumed_from_step") or 0
    assert resumed >= 4 and resumed % 2 == 0, trainer["counters"]
    events = stored_events(settings, run["id"])
    steps = [s for s in steps_after_attempt(events, 2) if s is not None]
    assert steps and steps == sorted(set(steps)) and steps[0] == resumed + 1, steps


def ledger(service: Service, run_id: str) -> list[dict[str, Any]]:
    return list(service.http.get(f"/runs/{run_id}/ledger").json()["entries"])


@pytest.mark.skipif(bool(missing_stages("hillclimb", False)), reason="hill-climb not built")
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_killed_coordinator_resumes_without_duplicates(
    service: Service, settings: Settings
) -> None:
    from tests.hillclimb.test_service import tiny_search

    spec = tiny_search(settings.data_dir, max_candidates=4, parallelism=1)
    service.start_worker("worker-a")
    service.start_worker("worker-b")
    search = service.submit(spec)

    def in_flight() -> bool:  # kill while a candidate is running, after one has finished
        rows = ledger(service, search["id"])
        events = Counter(r["event"] for r in rows)
        return events["finished"] >= 1 and events["started"] > events["finished"]

    wait_for(in_flight, timeout=240, what="a second candidate in flight")
    holder = service.run(search["id"])["worker_id"]
    victim = {"worker-a": service.procs[1], "worker-b": service.procs[2]}[holder]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    service.start_worker("worker-c")
    done = service.wait_status(search["id"], "completed", "failed", timeout=400)
    assert done["status"] == "completed", done
    assert done["attempt"] == 2
    rows = ledger(service, search["id"])
    assert max(Counter((r["candidate_id"], r["event"]) for r in rows).values()) == 1
    assert [r["seq"] for r in rows] == list(range(rows[0]["seq"], rows[0]["seq"] + len(rows)))
    children = service.http.get("/runs", params={"parent": search["id"]}).json()["runs"]
    proposed = {r["candidate_id"] for r in rows if r["event"] == "proposed"}
    assert len(children) == len(proposed)  # one child run per candidate, none run twice
    jsonl = (settings.runs_dir / search["id"] / "hillclimb_ledger.jsonl").read_text().splitlines()
    assert len(jsonl) == len(rows)
    assert all(json.loads(line)["seq"] == r["seq"] for line, r in zip(jsonl, rows, strict=True))
