"""Runs through real workers: submit → running → completed; cancel; kill -9 and resume; Redis
losing its queue; failures; budgets; dry runs. On SQLite and on Postgres.

The tests that run one run of their own to its end share a service per database (an API and a
worker, `working_service`); those that keep a run queued, or name, kill or stop their workers,
start a `service` of their own."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for
from tests.stack import forget_namespace


def loop_spec(steps: int, step_seconds: float, **extra: object) -> dict[str, object]:
    return {"kind": "selftest", "steps": steps, "step_seconds": step_seconds, **extra}


def step_of(service: Service, run_id: str) -> int:
    return int((service.run(run_id)["card"] or {}).get("step") or 0)


def read_json(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.fixture
def shared(working_service: Service) -> tuple[Service, Settings]:
    """The module's service on one database, with its worker, and the settings it runs with."""
    return working_service, working_service.settings


def test_run_completes_with_real_manifests_and_summary(shared: tuple[Service, Settings]) -> None:
    service, settings = shared
    run = service.submit(loop_spec(12, 0.02))
    done = service.wait_status(run["id"], "completed", "failed")
    assert done["status"] == "completed", done
    run_dir = settings.runs_dir / run["id"]
    names = [s["name"] for s in done["stages"]]
    assert names == ["prepare", "loop"]
    for stage in done["stages"]:
        manifest = read_json(run_dir / stage["name"] / "manifest.json")
        assert manifest["status"] == "completed" and manifest["run_id"] == run["id"]
        started = datetime.fromisoformat(manifest["started_at"])
        finished = datetime.fromisoformat(manifest["completed_at"])
        assert started < finished
        for output in manifest["outputs"]:
            data = (run_dir / output["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == output["sha256"]
        assert stage["manifest"] == manifest  # the Stage row and the file agree
    loop = read_json(run_dir / "loop" / "manifest.json")
    assert loop["counters"]["steps_run"] == 12
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed"
    assert summary["usage"]["wall_seconds"] > 0.2 and summary["usage"]["peak_rss_bytes"] > 10**6
    assert done["usage"]["wall_seconds"] == summary["usage"]["wall_seconds"]
    snapshot = read_json(run_dir / "progress.snapshot.json")
    assert snapshot["percent_complete"] == 100.0 and snapshot["run_id"] == run["id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    statuses = [e["data"]["status"] for e in events if e["type"] == "status"]
    assert statuses == ["queued", "running", "completed"]
    metrics = [e for e in events if e["type"] == "metric"]
    assert [m["data"]["step"] for m in metrics] == list(range(1, 13))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_cancel_stops_a_running_loop_within_5s(shared: tuple[Service, Settings]) -> None:
    service, settings = shared
    run = service.submit(loop_spec(400, 0.05))
    wait_for(lambda: step_of(service, run["id"]) >= 3, timeout=30, what="the loop to run")
    asked = datetime.now(UTC)
    response = service.http.post(f"/runs/{run['id']}/cancel")
    assert response.status_code == 202
    done = service.wait_status(run["id"], "cancelled", "completed", "failed", timeout=30)
    assert done["status"] == "cancelled"
    loop = read_json(settings.runs_dir / run["id"] / "loop" / "manifest.json")
    assert loop["status"] == "failed" and loop["error"]["class"] == "cancelled"
    # The 5 s is the stage's: cancel asked to the loop stopped and recorded (the run's closing
    # writes and this poll come after, and a loaded machine stretches those).
    took = (datetime.fromisoformat(loop["completed_at"]) - asked).total_seconds()
    assert took < 5.0, took
    checkpoint = read_json(settings.runs_dir / run["id"] / "loop" / "checkpoint.json")
    assert 3 <= checkpoint["step"] < 400


def test_killed_worker_is_resumed_by_another_as_attempt_2(
    service: Service, settings: Settings
) -> None:
    first = service.start_worker("worker-a")
    run = service.submit(loop_spec(60, 0.05, checkpoint_every=5))
    wait_for(lambda: step_of(service, run["id"]) >= 12, timeout=30, what="a dozen steps")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    service.start_worker("worker-b")
    done = service.wait_status(run["id"], "completed", "failed", timeout=60)
    assert done["status"] == "completed", done
    assert done["attempt"] == 2
    assert [a["worker_id"] for a in done["attempts"]] == ["worker-a", "worker-b"]
    assert [a["outcome"] for a in done["attempts"]] == ["interrupted", "completed"]
    loop = read_json(settings.runs_dir / run["id"] / "loop" / "manifest.json")
    resumed = loop["counters"]["resumed_from_step"]
    assert resumed >= 10 and resumed % 5 == 0
    assert loop["counters"]["steps_run"] == 60 - resumed  # nothing redone after the checkpoint


def test_queued_run_lost_by_redis_is_enqueued_again(service: Service) -> None:
    run = service.submit(loop_spec(3, 0.01))
    # Redis restarted empty: every key of this service (its queue and the job) is gone.
    forget_namespace(service.env["TRM_REDIS_URL"], service.env["TRM_REDIS_NAMESPACE"])
    service.start_worker()
    done = service.wait_status(run["id"], "completed", "failed", timeout=30)
    assert done["status"] == "completed"


def test_a_failing_stage_fails_the_run_with_its_reason(shared: tuple[Service, Settings]) -> None:
    service, settings = shared
    run = service.submit(loop_spec(10, 0.01, fail_at_step=4))
    done = service.wait_status(run["id"], "completed", "failed")
    assert done["status"] == "failed"
    assert done["failure_class"] == "internal"
    assert "fail at step 4" in done["failure_reason"]
    loop = read_json(settings.runs_dir / run["id"] / "loop" / "manifest.json")
    assert loop["status"] == "failed" and "fail at step 4" in loop["error"]["message"]
    assert "Traceback" in loop["error"]["traceback"]
    summary = read_json(settings.runs_dir / run["id"] / "summary.json")
    assert summary["status"] == "failed" and summary["failure_class"] == "internal"


def test_budget_stops_the_run_completed_by_budget(shared: tuple[Service, Settings]) -> None:
    service, settings = shared
    # 4 s of a 10 s loop: a busy machine may take a second or two to start the stage's child.
    run = service.submit(loop_spec(500, 0.02, budget={"max_seconds": 4}))
    done = service.wait_status(run["id"], "completed", "failed", timeout=30)
    assert done["status"] == "completed" and done["stopped_by"] == "budget"
    loop = read_json(settings.runs_dir / run["id"] / "loop" / "manifest.json")
    # The work stops at the deadline, within one step: no more 0.02 s steps than fit in 4 s.
    assert 0 < loop["counters"]["steps_run"] <= 4 / 0.02 + 1
    # The overshoot also counts the stage child's exit and the run's closing writes, which a
    # loaded machine stretches past a second; it stays far under the 6 s the loop had left.
    summary = read_json(settings.runs_dir / run["id"] / "summary.json")
    assert 0 <= summary["budget_overshoot_s"] < 3.0


def test_dry_run_train_writes_resolved_config_and_planned_manifests(
    shared: tuple[Service, Settings],
) -> None:
    service, settings = shared
    data = settings.data_dir / "logs"
    data.mkdir(parents=True)
    rows = [{"state": {"x": i}, "tools": ["a", "b"], "action": "ab"[i % 2]} for i in range(6)]
    lines = [json.dumps(r) for r in rows] + ["not json", json.dumps(rows[0])]
    (data / "rows.jsonl").write_text("\n".join(lines) + "\n")
    spec = {
        "kind": "train",
        "dry_run": True,
        "corpus": {"sources": [{"type": "jsonl", "name": "rows", "path": "logs/rows.jsonl"}]},
    }
    run = service.submit(spec)
    done = service.wait_status(run["id"], "completed", "failed")
    assert done["status"] == "completed", done
    assert [(s["name"], s["status"]) for s in done["stages"]] == [
        ("prepare_corpus", "planned"),
        ("prepare_config", "planned"),
        ("launch_trainer", "planned"),
        ("evaluate", "planned"),
    ]
    resolved = read_json(settings.runs_dir / run["id"] / "trainer_config.resolved.json")
    assert resolved["trainer"] == "trm" and resolved["trainer_config"]["n_recursions"] == 2
    assert resolved["trainer_config"]["supervision_steps"] == 3  # the spec's defaults, filled in
    source = resolved["corpus"]["sources"][0]["path"]
    assert source == str((settings.data_dir / "logs" / "rows.jsonl").resolve())
    plan = read_json(settings.runs_dir / run["id"] / "corpus.plan.json")
    source_counts = plan["sources"][0]
    assert (source_counts["rows_read"], source_counts["rows_kept"]) == (8, 6)
    assert source_counts["invalid"]["bad_json"]["first_lines"] == [
        {"file": "rows.jsonl", "lines": [7]}
    ]
    assert source_counts["duplicates"] == 1
    assert "would read 8 rows: keep 6" in done["stages"][0]["manifest"]["notes"][0]
    assert not (settings.runs_dir / run["id"] / "corpus" / "train.jsonl").exists()


def test_api_refuses_data_paths_outside_the_data_dir(shared: tuple[Service, Settings]) -> None:
    service, _ = shared
    spec = {
        "kind": "train",
        "dry_run": True,
        "corpus": {"sources": [{"type": "jsonl", "name": "x", "path": "../../etc/passwd"}]},
    }
    response = service.http.post("/runs", json=spec)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "corpus.sources[0].path"


def test_worker_shutdown_hands_the_run_to_the_next_worker(
    service: Service, settings: Settings
) -> None:
    first = service.start_worker("worker-a")
    run = service.submit(loop_spec(60, 0.05, checkpoint_every=1))
    wait_for(lambda: step_of(service, run["id"]) >= 5, timeout=30, what="five steps")
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=20) == 0
    middle = service.run(run["id"])
    assert middle["status"] in ("interrupted", "queued")
    service.start_worker("worker-b")
    done = service.wait_status(run["id"], "completed", "failed", timeout=60)
    assert done["status"] == "completed" and done["attempt"] == 2
    loop = read_json(settings.runs_dir / run["id"] / "loop" / "manifest.json")
    assert loop["counters"]["resumed_from_step"] >= 5


def test_workers_and_their_stage_children_run_at_the_worker_priority(
    shared: tuple[Service, Settings],
) -> None:
    """TRM_WORKER_NICE (default 10): on a shared host, queued work takes the CPU the API leaves."""
    import psutil

    service, settings = shared
    api, worker = (psutil.Process(proc.pid) for proc in service.procs[:2])  # as started
    run = service.submit(loop_spec(400, 0.05))
    service.wait_status(run["id"], "running")
    wait_for(lambda: bool(worker.children(recursive=True)), 30, "the loop stage's child")
    assert settings.worker_nice == 10 and api.nice() == 0
    threads = [t.id for t in worker.threads()]
    assert [os.getpriority(os.PRIO_PROCESS, t) for t in threads] == [10] * len(threads)
    assert [c.nice() for c in worker.children(recursive=True)] == [10] * len(
        worker.children(recursive=True)
    )
    assert service.http.post(f"/runs/{run['id']}/cancel").status_code == 202
    assert service.wait_status(run["id"], "cancelled", "completed", "failed")["status"] == (
        "cancelled"
    )  # the worker is free again for the module's next test
