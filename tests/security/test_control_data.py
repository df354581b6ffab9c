"""Workers take no control data (output folders, resolved configs, run references, scores) from
files in a run directory, which a client could write: forged files are written straight to disk,
as an uploader could before uploads were locked down. Real API, real workers, real files."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from core.db import make_engine
from core.models import Run, utcnow
from core.settings import Settings
from tests.conftest import Service, rows_folder

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@contextmanager
def forging(paths: Callable[[], list[Path]], forged: dict[str, Any]) -> Iterator[None]:
    """Overwrite every file `paths()` names with `forged` as soon as it appears (and again
    whenever the worker rewrites it), until the block ends."""
    text = json.dumps(forged)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.02):
            for path in paths():
                try:
                    if path.read_text() != text:
                        path.write_text(text)
                except OSError:
                    continue

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_forged_resolved_config_does_not_move_the_trainer_output(
    service: Service, settings: Settings, route_corpus: Path, tmp_path: Path
) -> None:
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": {"hidden": 16, "max_steps": 2},
        "corpus": {
            "sources": [{"type": "jsonl", "name": "r", "path": rows_folder(settings, route_corpus)}]
        },
    }
    run = service.submit(spec)
    run_dir = settings.run_dir(run["id"])
    elsewhere = tmp_path / "elsewhere"
    forged = {
        "trainer": "trm",
        "config": {"hidden": 16, "max_steps": 2},
        "contract": "action_only",
        "corpus_dir": str(run_dir / "corpus"),
        "output_dir": str(elsewhere),
        "seed": 0,
        "probe": False,
        "budget": {},
        "model_cache": str(elsewhere),
    }
    with forging(
        lambda: [p for p in [run_dir / "trainer_config.resolved.json"] if p.exists()], forged
    ):
        service.start_worker()
        done = service.wait_status(run["id"], "completed", "failed", timeout=180)
    assert done["status"] == "completed", done.get("failure_reason")
    assert (run_dir / "trainer" / "model.safetensors").is_file()
    assert not elsewhere.exists()


def finished_search(**picks: str) -> dict[str, Any]:
    """A summary.json as a finished hill-climb writes it: its picks under `search`."""
    return {"status": "completed", "search": picks}


def run_row(settings: Settings, kind: str, status: str) -> str:
    """A run's row as the API sees it at submit (its kind and status), and nothing else."""
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        run = Run(
            kind=kind,
            status=status,
            queue="cpu",
            spec={"kind": kind},
            spec_hash="f" * 64,
            finished_at=utcnow(),
        )
        db.add(run)
        db.commit()
        run_id = str(run.id)
    engine.dispose()
    return run_id


def search_run(settings: Settings, summary: dict[str, Any]) -> str:
    """A completed hill-climb's row (what the API checks a `:root`/`:final` against at submit)
    whose directory holds a forged summary.json."""
    run_id = run_row(settings, "hillclimb", "completed")
    run_dir = settings.run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps({**summary, "run_id": run_id}))
    return run_id


def bench_dry_run(service: Service, router: str) -> Any:
    return service.http.post(
        "/benches/routerbench", params={"dry_run": "true"}, json={"router": router}
    )


def test_a_forged_summary_of_a_referenced_run_does_not_steer_a_bench_outside_runs_dir(
    service: Service, settings: Settings
) -> None:
    # What the forged `best_run` would point at: a "run" one level above RUNS_DIR.
    above = settings.runs_dir.resolve().parent
    (above / "summary.json").write_text(json.dumps({"status": "completed"}))
    (above / "trainer_config.resolved.json").write_text(json.dumps({"trainer": "trm"}))
    (above / "trainer").mkdir(exist_ok=True)
    (above / "trainer" / "model.safetensors").write_bytes(b"not a model")
    for forged in ("..", ".", "/etc", "../data"):
        search = search_run(settings, finished_search(best_run=forged))
        response = bench_dry_run(service, f"{search}:final")
        assert response.status_code == 422, (forged, response.status_code, response.text[:300])
        error = response.json()["error"]
        assert error["message"].startswith("router:") and "not a run id" in error["message"]
        assert str(above / "trainer") not in response.text


def test_a_self_referencing_best_run_is_a_422_not_a_500(
    service: Service, settings: Settings
) -> None:
    run_id = search_run(settings, {})
    run_dir = settings.run_dir(run_id)
    for best_run in (f"{run_id}:final", run_id):  # the first one recursed until a 500
        (run_dir / "summary.json").write_text(json.dumps(finished_search(best_run=best_run)))
        response = bench_dry_run(service, f"{run_id}:final")
        assert response.status_code == 422, (response.status_code, response.text[:300])
        assert response.json()["error"]["message"].startswith("router:")
    assert "loop" in response.json()["error"]["message"]
    # Two searches naming each other: one step each (a pick names a train run, never a pick).
    other = search_run(settings, finished_search(root_candidate_run=run_id))
    (run_dir / "summary.json").write_text(json.dumps(finished_search(best_run=other)))
    response = bench_dry_run(service, f"{other}:root")
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert response.json()["error"]["message"].startswith("router:")


def test_bench_run_references_are_checked_as_run_ids(service: Service) -> None:
    for router in ("..:final", "/abs:final", "../x:root", "01J00000000000000000000000:best"):
        response = service.http.post("/benches/routerbench", json={"router": router})
        assert response.status_code == 422, (router, response.status_code, response.text[:300])
        assert response.json()["error"]["details"][0]["field"] == "router"
    missing = "01J00000000000000000000000"  # a well-formed id of no run
    response = bench_dry_run(service, missing)
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert response.json()["error"]["message"] == f"router: no run {missing}"


def test_a_forged_candidate_scorecard_does_not_enter_the_ledger(
    service: Service, settings: Settings
) -> None:
    from tests.hillclimb.test_service import tiny_search

    spec = tiny_search(settings.data_dir, max_candidates=2, parallelism=1)
    search = service.submit(spec)
    forged = {
        "train_score": 0.999,
        "anchor_score": 0.999,
        "failure_rate": 0.0,
        "recovery_rate": 1.0,
        "generalization_gap": 0.0,
    }

    def candidate_scorecards() -> list[Path]:
        return [
            p for p in settings.runs_dir.glob("*/scorecard.json") if p.parent.name != search["id"]
        ]

    with forging(candidate_scorecards, forged):
        service.start_worker()
        done = service.wait_status(search["id"], "completed", "failed", timeout=240)
    assert done["status"] == "completed", done.get("failure_reason")
    finished = [r for r in service.ledger(search["id"]) if r["event"] == "finished"]
    assert len(finished) == 2
    for row in finished:
        child = service.run(row["run_id"])
        assert (settings.run_dir(row["run_id"]) / "scorecard.json").read_text() == json.dumps(
            forged
        )  # the forgery was in place when the search read the candidate
        evaluated = next(s for s in child["stages"] if s["name"] == "evaluate")
        recorded = evaluated["manifest"]["result"]
        assert row["anchor_score"] == recorded["anchor_score"] != 0.999, (row, recorded)
        assert row["train_score"] == recorded["train_score"] != 0.999


def test_a_bench_side_is_refused_at_submit_when_its_run_cannot_give_what_the_bench_reads(
    service: Service, settings: Settings
) -> None:
    def bench(router: str) -> Any:
        return service.http.post("/benches/routerbench", json={"router": router})

    running_search = run_row(settings, "hillclimb", "running")
    failed_train = run_row(settings, "train", "failed")
    done_train = run_row(settings, "train", "completed")
    for router, words in (
        (f"{running_search}:final", "is running, not completed"),
        (f"{failed_train}", "is failed: it left no model"),
        (f"{done_train}:final", "names a hill-climb's pick"),
    ):
        answer = bench(router)
        assert answer.status_code == 422, (router, answer.text)
        assert words in answer.json()["error"]["message"], answer.text
    # Behind a queued train run on one worker's queue the bench finds its model: accepted.
    queued_train = run_row(settings, "train", "queued")
    assert bench(queued_train).status_code == 202
