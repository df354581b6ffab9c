"""Data sets through the live API (real uvicorn, real worker, SQLite and Postgres): a folder of
play logs pushed as an archive trains a controller by the data set's name; listing, showing and
deleting; a data set an unfinished run reads is neither deleted nor replaced under it."""

from __future__ import annotations

import json
from pathlib import Path

from core.settings import Settings
from tests.conftest import Service
from tests.datasets.archives import left_behind, push, sha, tar_of
from worker.envs import generate


def play_logs(root: Path) -> Path:
    generate(root, families=["route"], worlds=3, episodes=12, seed=0)
    return root


def test_a_pushed_folder_of_play_logs_trains_a_controller_by_its_name(
    service: Service, settings: Settings, tmp_path: Path
) -> None:
    body = tar_of(play_logs(tmp_path / "play"))
    pushed = push(service.http, "mylogs", body)
    assert pushed.status_code == 201, pushed.text
    answer = pushed.json()
    assert answer["dataset"]["sha256"] == sha(body) and answer["dataset"]["format"] == "tar.gz"
    view = answer["show"]
    assert view["sources"] == [
        {"type": "trm_play_root", "name": "mylogs", "dataset": "mylogs", "path": None, "files": 3}
    ]
    assert set(view["families"]) == {"route"} and len(view["worlds"]) == 3
    assert view["rows"] > 0 and view["complete"] and not view["malformed"]

    listed = service.http.get("/datasets").json()
    assert [d["name"] for d in listed["datasets"]] == ["mylogs"]
    assert listed["data_dir"] == str(settings.data_dir)
    shown = service.http.get("/datasets/mylogs").json()
    assert shown["rows"] == view["rows"] and shown["files_total"] == 3

    service.start_worker()
    source = {"type": "trm_play_root", "name": "logs", "dataset": "mylogs"}
    spec = {
        "kind": "train",
        "trainer": "gbdt",
        "probe": True,
        "corpus": {"sources": [source], "split": {"by": "episode"}},
    }
    run = service.submit(spec)
    done = service.wait_status(run["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done.get("failure_reason")
    stored = done["spec"]["corpus"]["sources"][0]
    assert stored["path"] == str((settings.data_dir / "datasets" / "mylogs").resolve())
    assert "dataset" not in stored
    manifest = service.http.get(f"/runs/{run['id']}/artifacts/corpus/manifest.json")
    assert manifest.status_code == 200, manifest.text
    assert json.loads(manifest.content)["sources"][0]["rows_kept"] > 0

    gone = service.http.delete("/datasets/mylogs")
    assert gone.status_code == 200 and gone.json()["name"] == "mylogs"
    assert service.http.get("/datasets").json()["datasets"] == []
    assert left_behind(settings, "mylogs") == []
    missing = service.http.get("/datasets/mylogs")
    assert missing.status_code == 404 and "trm data push" in missing.text


def test_a_data_set_an_unfinished_run_reads_is_not_deleted_or_replaced(
    service: Service, settings: Settings, tmp_path: Path
) -> None:
    body = tar_of(play_logs(tmp_path / "play"))
    assert push(service.http, "busy", body).status_code == 201
    again = push(service.http, "busy", body)
    assert again.status_code == 409 and "replace" in again.json()["error"]["message"]
    source = {"type": "trm_play_root", "name": "logs", "dataset": "busy", "path": "."}
    spec = {"kind": "train", "trainer": "gbdt", "probe": True, "corpus": {"sources": [source]}}
    run = service.submit(spec)  # no worker: it stays queued
    for refused in (
        service.http.delete("/datasets/busy"),
        push(service.http, "busy", body, replace="true"),
    ):
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["details"]["runs"] == [run["id"]]
    assert service.http.post(f"/runs/{run['id']}/cancel").status_code in (200, 202)
    service.wait_status(run["id"], "cancelled")
    replaced = push(service.http, "busy", body, replace="true")
    assert replaced.status_code == 201 and replaced.json()["replaced"] is True
    assert service.http.delete("/datasets/busy").status_code == 200
    assert left_behind(settings, "busy") == []


def test_specs_name_data_sets_by_name_and_refusals_say_where_data_goes(
    service: Service, settings: Settings
) -> None:
    spec = {
        "kind": "train",
        "trainer": "gbdt",
        "dry_run": True,
        "corpus": {"sources": [{"type": "jsonl", "name": "r", "dataset": "nosuch"}]},
    }
    unknown = service.http.post("/runs", json=spec)
    assert unknown.status_code == 422, unknown.text
    error = unknown.json()["error"]
    assert error["details"][0]["field"] == "corpus.sources[0].dataset"
    assert "known: none" in error["message"] and "trm data push" in error["message"]

    rows = b'{"state": "s", "tools": ["a", "b"], "action": "a"}\n' * 3 + b"{oops\n[1]\n"
    assert push(service.http, "rows", rows, filename="r.jsonl").status_code == 201
    shown = service.http.get("/datasets/rows").json()
    assert shown["files"] == [
        {"path": "r.jsonl", "bytes": len(rows), "rows": 3, "malformed": 2, "read": "all"}
    ]
    assert shown["malformed"] == [
        {"file": "r.jsonl", "line": 4, "reason": "bad_json"},
        {"file": "r.jsonl", "line": 5, "reason": "not_object"},
    ]
    assert shown["sources"][0]["type"] == "jsonl"

    other = service.http.post(
        "/runs",
        json={
            **spec,
            "corpus": {"sources": [{"type": "jsonl", "name": "r", "dataset": "nosuch2"}]},
        },
    )
    assert "known: rows" in other.json()["error"]["message"]
    leaving = {"type": "jsonl", "name": "r", "dataset": "rows", "path": "../../x"}
    refused = service.http.post("/runs", json={**spec, "corpus": {"sources": [leaving]}})
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["field"] == "corpus.sources[0].path"
    named = {"type": "jsonl", "name": "r", "dataset": "rows"}
    ok = service.http.post("/runs", json={**spec, "corpus": {"sources": [named]}})
    assert ok.status_code == 202, ok.text

    outside = {"type": "jsonl", "name": "r", "path": "/etc"}
    far = service.http.post("/runs", json={**spec, "corpus": {"sources": [outside]}})
    message = far.json()["error"]["message"]
    assert far.status_code == 422 and "outside TRM_DATA_DIR" in message
    assert str(settings.data_dir) in message and "PUT /datasets/" in message
    assert "trm data push" in message
