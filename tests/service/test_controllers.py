"""Use what you train (SPEC §12) on the real service: an API, a worker, the decision process
(`trm decide-server`) and Redis, with a trm and a gbdt trained through the service (once a
session, tests/probe_runs.py). Promote, list, decide through the API, promote again, roll back;
bad input and unfinished runs refused."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import Session

from core.controllers import resolve
from core.db import make_engine
from core.models import Run, Stage, utcnow
from core.settings import Settings
from tests.conftest import QUICK, ROOT, Service
from tests.probe_runs import TINY_TRM, ProbeRuns
from tests.stack import Scratch, create_database, wait_for

ROW = {"state": "request: summarize the quarterly report", "tools": ["TRM_ONLY", "LLM_DIRECT"]}


class Trained:
    def __init__(self, svc: Service, trm: str, gbdt: str) -> None:
        self.svc, self.trm, self.gbdt = svc, trm, gbdt
        self.http = svc.http

    def promote(self, name: str, run_id: str, **extra: Any) -> httpx.Response:
        return self.http.post("/controllers", json={"name": name, "run_id": run_id, **extra})

    def decide(self, name: str, rows: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        return self.http.post(f"/controllers/{name}/decide", json={"rows": rows, **extra})


@contextlib.contextmanager
def trained_service(
    database: str, root: Path, route_corpus: Path, probe_runs: ProbeRuns
) -> Iterator[tuple[Service, dict[str, str]]]:
    """A service on `database` with the decision process and a worker, holding the session's trm
    and gbdt probe runs (their ids by trainer); everything stopped and dropped after."""
    scratch = Scratch(root, create_database(database, root))
    svc = Service({**scratch.env, **QUICK}, root / "logs")
    try:
        runs = probe_runs.install(scratch.migrate(), route_corpus)
        svc.start_decider()
        svc.start_api()
        svc.start_worker()
        for run_id in runs.values():
            assert svc.run(run_id)["status"] == "completed"
        yield svc, runs
    finally:
        svc.stop()
        scratch.drop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def trained(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    route_corpus: Path,
    probe_runs: ProbeRuns,
) -> Iterator[Trained]:
    """One service per database with the decision process, and a trm and a gbdt trained."""
    root = tmp_path_factory.mktemp(f"controllers-{request.param}")
    with trained_service(request.param, root, route_corpus, probe_runs) as (svc, runs):
        yield Trained(svc, runs["trm"], runs["gbdt"])


def test_promote_decide_promote_again_and_roll_back(trained: Trained) -> None:
    promoted = trained.promote("router", trained.trm, abstain_margin=0.2)
    assert promoted.status_code == 201, promoted.text
    v1 = promoted.json()
    assert (v1["version"], v1["live"], v1["trainer"]) == (1, True, "trm")
    assert v1["run_id"] == trained.trm and v1["abstain_margin"] == 0.2
    assert v1["promoted_by"] == "anonymous" and v1["features_format"]
    assert v1["anchor_score"] == v1["scores"]["anchor_score"] is not None
    assert v1["anchors"].endswith("rows")

    listed = trained.http.get("/controllers").json()["controllers"]
    assert [(c["name"], c["live_version"], c["versions"]) for c in listed] == [("router", 1, 1)]

    rows = [ROW, {"state": '{"task": "translate"}', "tools": ["A", "B", "C"]}]
    answer = trained.decide("router", rows)
    assert answer.status_code == 200, answer.text
    first = answer.json()
    assert (first["controller"], first["version"], first["trainer"]) == ("router", 1, "trm")
    for row, decision in zip(rows, first["decisions"], strict=True):
        assert decision["action"] in row["tools"]
        assert len(decision["scores"]) == len(row["tools"])
        assert abs(sum(decision["scores"]) - 1.0) < 1e-6
        assert decision["abstain"] == (decision["margin"] < 0.2)

    # A second version: the next call after the promotion's answer is decided by it.
    second = trained.promote("router", trained.gbdt)
    promoted_at = time.monotonic()
    assert second.status_code == 201 and second.json()["version"] == 2, second.text
    now = trained.decide("router", [ROW]).json()
    latency = time.monotonic() - promoted_at
    assert (now["version"], now["trainer"]) == (2, "gbdt"), now
    assert latency < 1.0, f"version 2 answered {latency:.3f}s after its promotion"
    print(f"promotion to first decision by the new version: {latency * 1000:.0f} ms")

    shown = trained.http.get("/controllers/router").json()
    assert shown["live_version"] == 2
    assert [(v["version"], v["live"]) for v in shown["versions"]] == [(1, False), (2, True)]
    # A pinned version decides while another is live, and its own answer says which.
    pinned = trained.decide("router", [ROW], version=1).json()
    assert pinned["version"] == 1 and same(pinned["decisions"], first["decisions"][:1])
    direct = httpx.post(
        f"{trained.svc.env['TRM_DECIDE_URL']}/decide",
        json={"controller": "router@1", "rows": [ROW]},
    ).json()
    assert direct["version"] == 1 and same(direct["decisions"], pinned["decisions"])

    back = trained.http.post("/controllers/router/rollback", json={"version": 1})
    assert back.status_code == 200 and back.json()["live_version"] == 1, back.text
    again = trained.decide("router", rows).json()
    assert again["version"] == 1 and same(again["decisions"], first["decisions"])


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """The same decisions (a batch of another size may round a probability differently)."""
    return [d["action"] for d in a] == [d["action"] for d in b] and all(
        x["scores"] == pytest.approx(y["scores"], abs=1e-5) for x, y in zip(a, b, strict=True)
    )


def test_bad_rows_unknown_controllers_and_versions_are_refused_by_name(trained: Trained) -> None:
    assert trained.promote("checker", trained.gbdt).status_code == 201
    cases = [
        ([ROW, {"state": "s", "tools": []}], {}, 422, "rows[1].tools"),
        ([{"state": "s", "tools": ["A", "A"]}], {}, 422, "rows[0].tools[1]"),
        ([{"state": "s"}], {}, 422, "rows[0].tools"),
        ([], {}, 422, "rows"),
        ([ROW], {"version": 7}, 404, "version"),
    ]
    for rows, extra, status, field in cases:
        answer = trained.decide("checker", rows, **extra)
        assert answer.status_code == status, (rows, answer.text)
        error = answer.json()["error"]
        assert field in [d["field"] for d in error["details"]], error
    unknown = trained.decide("nobody", [ROW])
    assert unknown.status_code == 404 and "nobody" in unknown.json()["error"]["message"]
    for bad in ("Has Spaces", "x" * 65):
        answer = trained.promote(bad, trained.trm)
        assert answer.status_code == 422 and answer.json()["error"]["details"][0]["field"] == "name"
    margin = trained.promote("checker", trained.trm, abstain_margin=1.5)
    assert margin.status_code == 422 and "abstain_margin" in margin.text
    missing = trained.http.post("/controllers/checker/rollback", json={"version": 9})
    assert missing.status_code == 404 and "no version 9" in missing.text
    too_many = trained.decide("checker", [ROW] * 1025)
    assert too_many.status_code == 422 and too_many.json()["error"]["details"][0]["field"] == "rows"
    assert trained.http.get("/controllers/checker").json()["live_version"] == 1


def test_promotions_of_one_name_at_once_each_get_their_own_version(trained: Trained) -> None:
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: trained.promote("busy", trained.trm), range(6)))
    assert [a.status_code for a in answers] == [201] * 6, [a.text for a in answers]
    assert sorted(a.json()["version"] for a in answers) == [1, 2, 3, 4, 5, 6]
    shown = trained.http.get("/controllers/busy").json()
    assert shown["live_version"] == 6 and len(shown["versions"]) == 6


def test_the_decision_process_keeps_the_most_recently_used_versions_loaded(
    trained: Trained,
) -> None:
    from worker.decide.server import Versions

    for run_id in (trained.trm, trained.gbdt, trained.trm):
        assert trained.promote("kept", run_id).status_code == 201
    health = f"{trained.svc.env['TRM_DECIDE_URL']}/healthz"
    # The new live version is loaded ahead of any call for it (the process polls every 0.5 s).
    wait_for(
        lambda: {"name": "kept", "version": 3} in httpx.get(health).json()["loaded"],
        timeout=5,
        what="version 3 of `kept` loaded ahead",
    )
    with Session(make_engine(trained.svc.settings.database_url)) as db:
        rows = [resolve(db, "kept", v) for v in (1, 2, 3)]
    versions = Versions(trained.svc.settings.runs_dir, size=2)
    first = versions.get(rows[0])
    versions.get(rows[1])
    assert versions.get(rows[0]) is first  # kept, and now the most recently used
    versions.get(rows[2])
    assert versions.loaded() == [("kept", 1), ("kept", 3)]


def test_only_a_completed_scored_train_run_or_a_finished_search_is_promoted(
    trained: Trained,
) -> None:
    svc, settings = trained.svc, trained.svc.settings
    answer = trained.promote("later", "01J00000000000000000000000")
    assert answer.status_code == 404 and "no run" in answer.json()["error"]["message"]
    spec = {
        "kind": "train",
        "trainer": "trm",
        "trm": TINY_TRM,
        "corpus": {"sources": [{"type": "jsonl", "name": "r", "path": "route"}]},
    }
    queued = svc.submit(spec)
    assert svc.http.post(f"/runs/{queued['id']}/cancel").status_code == 202
    svc.wait_status(queued["id"], "cancelled")
    answer = trained.promote("later", queued["id"])
    assert answer.status_code == 409, answer.text
    assert "cancelled, not completed" in answer.json()["error"]["message"]
    dry = svc.submit({**spec, "dry_run": True})
    svc.wait_status(dry["id"], "completed")
    answer = trained.promote("later", dry["id"])
    assert answer.status_code == 422 and "dry run" in answer.json()["error"]["message"]
    assert trained.http.get("/controllers/later").status_code == 404

    # A finished hill-climb promotes its best candidate's train run.
    search = finished_search(settings, best_run=trained.trm, candidate="c002")
    answer = trained.promote("searched", search)
    assert answer.status_code == 201, answer.text
    version = answer.json()
    assert (version["run_id"], version["source_run_id"]) == (trained.trm, search)
    assert version["candidate_id"] == "c002"
    empty = finished_search(settings, best_run=None, candidate=None)
    answer = trained.promote("searched", empty)
    assert answer.status_code == 409 and "kept no best candidate" in answer.text


def finished_search(settings: Settings, best_run: str | None, candidate: str | None) -> str:
    """A completed hill-climb's rows as its `finalize` stage leaves them (the search itself is
    tests/hillclimb/test_service.py's)."""
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        run = Run(
            kind="hillclimb",
            status="completed",
            queue="cpu",
            spec={"kind": "hillclimb"},
            spec_hash="h" * 64,
            finished_at=utcnow(),
        )
        db.add(run)
        db.flush()
        manifest = {"best_run": best_run, "best_candidate": candidate}
        db.add(
            Stage(run_id=run.id, name="finalize", position=2, status="completed", manifest=manifest)
        )
        db.commit()
        run_id = str(run.id)
    engine.dispose()
    return run_id


def test_the_cli_promotes_lists_decides_and_rolls_back(trained: Trained, tmp_path: Path) -> None:
    env = {**os.environ, **trained.svc.env, "TRM_URL": trained.svc.url}

    def trm(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "cli-router version 1 is live" in trm("promote", trained.trm, "--as", "cli-router")
    out = trm("promote", trained.gbdt, "--as", "cli-router", "--abstain-margin", "0.5")
    assert "cli-router version 2 is live" in out
    listed = trm("controllers").splitlines()
    assert any(line.startswith("cli-router") and "v2" in line for line in listed), listed
    shown = trm("controllers", "cli-router")
    assert "live v2" in shown and "* v2" in shown and "by " in shown
    one = trm("decide", "cli-router", "--state", ROW["state"], "--tools", "TRM_ONLY,LLM_DIRECT")
    assert "cli-router v2" in one and one.split()[0] in ROW["tools"]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROW) + "\n" + json.dumps({"state": {"k": 1}, "tools": ["x", "y"]}))
    printed = trm("decide", "cli-router", "--rows", str(rows)).splitlines()
    lines = [json.loads(line) for line in printed]
    assert [d["version"] for d in lines] == [2, 2] and lines[1]["action"] in ("x", "y")
    assert "cli-router version 1 is live" in trm("rollback", "cli-router", "1")
    assert "cli-router v1" in trm("decide", "cli-router", "--state", "s", "--tools", "a,b")
    shown = trained.http.get("/controllers/cli-router").json()
    assert shown["versions"][1]["promoted_by"].endswith("(anonymous)")


def test_trm_export_by_name_exports_the_version_the_registry_names(
    trained: Trained,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.cli import main as trm_main

    assert trained.promote("exported", trained.trm).status_code == 201
    runs, url = trained.svc.settings.runs_dir, trained.svc.url
    monkeypatch.chdir(tmp_path)  # --out relative to where the command runs
    out = tmp_path / "by-name"
    assert (
        trm_main(
            ["export", "exported@1", "--out", "by-name", "--url", url, "--runs-dir", str(runs)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"exported v1 (trm, run {trained.trm})" in printed
    assert "same action on every row" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    # The export is the model the name decides with.
    assert trained.decide("exported", [ROW]).json()["model_hash"] == manifest["model_hash"]

    # A version that is not there, a host whose runs folder is not the service's, a name the
    # registry does not know: exit 2, saying which and what to do.
    def refused(*args: str) -> str:
        assert trm_main(["export", *args, "--out", str(tmp_path / "no"), "--url", url]) == 2
        return capsys.readouterr().err

    assert "exported has no version 7 (it has 1)" in refused("exported@7", "--runs-dir", str(runs))
    err = refused("exported", "--runs-dir", str(tmp_path / "elsewhere"))
    assert f"{trained.trm}/trainer is not under the runs folder here" in err and "--runs-dir" in err
    assert "nobody" in refused("nobody")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_decide_without_a_decision_process_says_how_to_start_one(service: Service) -> None:
    answer = service.http.post("/controllers/router/decide", json={"rows": [ROW]})
    assert answer.status_code == 503
    assert "trm decide-server" in answer.json()["error"]["message"]
