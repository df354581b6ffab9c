"""The whole-answer trm as a service run: a puzzle set made with `trm envs generate`, a train run
with trainer trm_grid submitted by POST /runs to a real API and worker, its scorecard; cancel;
bad knobs refused at submit naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TINY = {
    "hidden": 16,
    "batch_size": 8,
    "n_recursions": 2,
    "cycles": 2,
    "supervision_steps": 3,
    "max_steps": 20,
    "eval_every": 10,
    "eval_puzzles": 8,
    "checkpoint_every": 10,
    "warmup_steps": 5,
}


# 33 days of work at a fast GPU's rate: over the default TRM_MAX_SECONDS (30 days).
HUGE = {"hidden": 1024, "batch_size": 4096, "n_recursions": 16, "cycles": 8, "max_steps": 10**6}


def make_puzzles(data_dir: Path, count: int = 60) -> Path:
    """A 4x4 sudoku set under DATA_DIR, written by the CLI a user would run."""
    out = data_dir / "puzzles"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "envs",
            "generate",
            "--families",
            "sudoku",
            "--side",
            "4",
            "--givens",
            "6",
            "--technique",
            "any",
            "--count",
            str(count),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out / "sudoku"


def grid_spec(path: Path, **knobs: Any) -> dict[str, Any]:
    return {
        "kind": "train",
        "trainer": "trm_grid",
        "corpus": {"sources": [{"type": "puzzles", "name": "sudoku4", "path": str(path)}]},
        "trm_grid": {**TINY, **knobs},
        "evaluate": {"train_sample": 10},
    }


def test_a_puzzle_train_run_completes_with_a_scorecard_against_one_step(
    service: Service, settings: Settings
) -> None:
    path = make_puzzles(settings.data_dir)
    service.start_worker()
    run = service.submit(grid_spec(path))
    done = service.wait_status(run["id"], "completed", "failed", "cancelled", timeout=90)
    assert done["status"] == "completed", done.get("failure_reason")
    assert [s["name"] for s in done["stages"]] == [
        "prepare_corpus",
        "prepare_config",
        "launch_trainer",
        "evaluate",
    ]
    card = service.http.get(f"/runs/{run['id']}/artifacts/scorecard.json").json()
    assert card["trainer"] == "trm_grid" and card["task"] == "whole_answer"
    assert card["n"]["anchor"] == 12  # 20% of 60 puzzles held out, never trained on
    assert 0.0 <= card["anchor_score"] <= 1.0 and card["scores"]["anchor_score"]["ci95"]
    assert 0.0 < card["cell_accuracy"]["anchor"] <= 1.0
    assert len(card["exact_by_step"]) == 3
    one_step = card["references"]["one_step"]
    assert one_step["anchor_score"]["n"] == 12 and "delta" in one_step
    assert [p["step"] for p in card["curve"]] == [10, 20]
    trainer = service.run(run["id"])["stages"][2]["manifest"]
    assert trainer["counters"]["steps"] == 20
    assert any(o["path"].startswith("trainer/checkpoints/") for o in trainer["outputs"])
    assert "estimate: 20 steps (trm_grid.max_steps=20)" in " ".join(trainer["notes"])
    corpus = json.loads((settings.runs_dir / run["id"] / "corpus" / "manifest.json").read_text())
    assert corpus["counters"]["train"] + corpus["counters"]["val"] == 48
    samples = service.http.get(f"/runs/{run['id']}/artifacts/samples.jsonl").text.splitlines()
    assert len(samples) == 12
    dry = service.submit({**grid_spec(path), "dry_run": True})
    planned = service.wait_status(dry["id"], "completed", "failed", timeout=30)
    notes = " ".join(n for s in planned["stages"] for n in (s["manifest"] or {}).get("notes", []))
    assert "would train a trm_grid model: 20 steps (trm_grid.max_steps=20)" in notes, notes
    assert "would read 60 rows: keep 60" in notes, notes
    # A puzzle model is no controller: promoting it says so instead of serving grids as actions.
    promoted = service.http.post("/controllers", json={"name": "sudoku", "run_id": run["id"]})
    assert promoted.status_code == 409 and "whole-answer" in promoted.json()["error"]["message"]
    # Nor is it benched: refused at submit, not accepted to fail in the worker.
    bench_spec = {"kind": "bench", "bench": "routerbench", "router": run["id"]}
    bench = service.http.post("/runs", json=bench_spec)
    assert bench.status_code == 422, bench.text
    assert bench.json()["error"]["details"][0]["field"] == "router"
    assert "whole-answer" in bench.json()["error"]["message"]


def test_cancel_stops_a_puzzle_run_within_5s(service: Service, settings: Settings) -> None:
    path = make_puzzles(settings.data_dir, count=20)
    service.start_worker()
    run = service.submit(grid_spec(path, max_steps=200_000, eval_every=100_000))

    def training() -> bool:
        return int((service.run(run["id"])["card"] or {}).get("step") or 0) > 5

    wait_for(training, 45, "the puzzle run to train a few steps")
    asked = datetime.now(UTC)
    assert service.http.post(f"/runs/{run['id']}/cancel").status_code in (200, 202)
    # The run's closing writes and this poll come after the stage stops; a loaded machine
    # stretches those, so the 5 s is read off the training stage's own manifest.
    done = service.wait_status(run["id"], "cancelled", "failed", "completed", timeout=60)
    assert done["status"] == "cancelled"
    manifest_path = settings.runs_dir / run["id"] / "launch_trainer" / "manifest.json"
    stopped = datetime.fromisoformat(json.loads(manifest_path.read_text())["completed_at"])
    assert (stopped - asked).total_seconds() < 5.0


def test_bad_puzzle_knobs_are_refused_at_submit_naming_the_field(
    service: Service, settings: Settings
) -> None:
    path = make_puzzles(settings.data_dir, count=10)
    cases = [
        (grid_spec(path, mixer="attention", hidden=30, heads=4), "trm_grid.heads"),
        (grid_spec(path, **HUGE), "trm_grid.max_steps"),
        (grid_spec(settings.data_dir), "corpus.sources[0].path"),  # a folder with no set
        ({**grid_spec(path), "trainer": "trm"}, "corpus"),
        (grid_spec(path, max_steps=10**9), "trm_grid.max_steps"),
        ({"kind": "hillclimb", "base": {**grid_spec(path), "kind": "train"}}, "base"),
    ]
    for spec, field in cases:
        response = service.http.post("/runs", json=spec)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["details"][0]["field"] == field, error
    over = service.http.post("/runs", json=grid_spec(path, **HUGE)).json()["error"]["message"]
    assert "TRM_MAX_SECONDS" in over and "at 1e+14 FLOP/s" in over
    # The same work under a budget is accepted: the budget stops it in time.
    budgeted = service.http.post(
        "/runs", json={**grid_spec(path, **HUGE), "dry_run": True, "budget": {"max_seconds": 60}}
    )
    assert budgeted.status_code == 202, budgeted.text
