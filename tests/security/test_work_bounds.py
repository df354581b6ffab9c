"""TRM_MAX_STEPS bounds steps, not work: at the schema's largest knobs one trm step took 74.7 s
(0.06 s at the defaults), a 706,000-step run was accepted and started, and a selftest of
1,000,000 steps x 60 s held the gpu slot for 694 days. A run's work is now held against
TRM_MAX_SECONDS: a selftest's at submit (422 naming the field), a trainer's on the worker before
training (an estimate in FLOPs, a lower bound) and again once a step has been measured, each
refusal `bad_input` with the figures and the knobs to lower. A run with a budget is stopped by
it in time and is not refused. Real API, real worker, real files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.conftest import Service, rows_folder

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
MAX_SECONDS = 3600


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "TRM_MAX_SECONDS": str(MAX_SECONDS)}


def refusal(service: Service, spec: dict[str, Any]) -> tuple[str, list[str]]:
    response = service.http.post("/runs", json=spec)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    return error["message"], [d["field"] for d in error["details"]]


def test_a_selftest_whose_work_is_over_max_seconds_is_refused_at_submit(service: Service) -> None:
    message, fields = refusal(service, {"kind": "selftest", "steps": 1_000_000, "step_seconds": 60})
    assert fields == ["steps"], message
    assert "steps=1000000 x step_seconds=60 is 60000000 s of work" in message, message
    assert "TRM_MAX_SECONDS" in message and str(MAX_SECONDS) in message, message
    # Within the limit, or stopped in time by a budget: accepted.
    for spec in (
        {"kind": "selftest", "steps": 100, "step_seconds": 30, "dry_run": True},
        {
            "kind": "selftest",
            "steps": 10**6,
            "step_seconds": 60,
            "budget": {"max_seconds": 60},
            "dry_run": True,
        },
    ):
        response = service.http.post("/runs", json=spec)
        assert response.status_code == 202, response.text


def test_a_trm_run_over_max_seconds_is_refused_by_its_estimate_or_its_measured_pace(
    service: Service, settings: Settings, route_corpus: Path
) -> None:
    corpus = {
        "sources": [{"type": "jsonl", "name": "r", "path": rows_folder(settings, route_corpus)}]
    }
    service.start_worker()
    # The schema's largest depth at a batch that fits in memory: days of work a step count hides.
    huge = {
        "hidden": 1024,
        "n_recursions": 16,
        "cycles": 8,
        "supervision_steps": 16,
        "batch_size": 64,
        "max_steps": 706_000,
    }
    estimated = service.submit({"kind": "train", "trm": huge, "corpus": corpus})
    # The defaults' FLOPs fit the limit at the estimate's generous rate; measured, they do not.
    paced = service.submit({"kind": "train", "trm": {"max_steps": 1_000_000}, "corpus": corpus})

    done = service.wait_status(estimated["id"], "completed", "failed", timeout=120)
    assert (done["status"], done["failure_class"]) == ("failed", "bad_input"), done
    reason = done["failure_reason"]
    assert "would take at least" in reason and "TRM_MAX_SECONDS" in reason, reason
    assert "trm.supervision_steps=16" in reason and "trm.hidden=1024" in reason, reason
    assert "lower trm.max_steps" in reason, reason
    assert not (settings.runs_dir / estimated["id"] / "trainer" / "checkpoints").exists()

    done = service.wait_status(paced["id"], "completed", "failed", timeout=120)
    assert (done["status"], done["failure_class"]) == ("failed", "bad_input"), done
    reason = done["failure_reason"]
    assert "s a step measured here, 1000000 steps (trm.max_steps=1000000)" in reason, reason
    assert f"limit of {MAX_SECONDS} s (TRM_MAX_SECONDS)" in reason, reason
    assert done["usage"]["wall_seconds"] < 60, done["usage"]  # refused after its first steps
