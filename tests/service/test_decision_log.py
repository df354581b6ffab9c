"""The loop closes (SPEC §12) on the real service: a controller that opts in logs its decisions,
outcomes reported for them become corpus rows (a `decision_log` source) a train run learns from,
and a shadow version scores beside the live one without changing its answers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import Session

from core.db import make_engine
from core.decisions import list_decisions, prune, record
from core.models import DecisionRecord, new_id
from core.rundir import CORPUS, CRITIC_ROWS, MANIFEST
from core.settings import Settings
from tests.conftest import Service
from tests.probe_runs import ProbeRuns
from tests.service.test_cli import trm as run_cli
from tests.service.test_controllers import Trained, trained_service


class Loop(Trained):
    def __init__(self, svc: Service, trm: str, gbdt: str, rows: list[dict[str, Any]]) -> None:
        super().__init__(svc, trm, gbdt)
        self.rows = rows  # real states and candidates: the route corpus's val rows

    def decided(self, name: str, rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        answer = self.decide(name, rows, **extra)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def outcomes(self, name: str, outcomes: list[dict[str, Any]]) -> httpx.Response:
        return self.http.post(f"/controllers/{name}/outcomes", json={"outcomes": outcomes})

    def shown(self, name: str) -> dict[str, Any]:
        return dict(self.http.get(f"/controllers/{name}").json())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def loop(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    route_corpus: Path,
    probe_runs: ProbeRuns,
) -> Iterator[Loop]:
    """One service per database with the decision process, and a trm and a gbdt trained on the
    same corpus."""
    root = tmp_path_factory.mktemp(f"decisions-{request.param}")
    with trained_service(request.param, root, route_corpus, probe_runs) as (svc, runs):
        lines = (route_corpus / "val.jsonl").read_text().splitlines()
        rows = [{"state": r["state"], "tools": r["tools"]} for r in map(json.loads, lines)]
        yield Loop(svc, runs["trm"], runs["gbdt"], rows[:60])


def test_decisions_are_logged_only_when_the_controller_opts_in(loop: Loop) -> None:
    assert loop.promote("quiet", loop.gbdt).status_code == 201
    answer = loop.decided("quiet", loop.rows[:3])
    assert [d["decision_id"] for d in answer["decisions"]] == [None] * 3
    assert loop.http.get("/controllers/quiet/decisions").json()["decisions"] == []
    assert loop.shown("quiet")["log_decisions"] is False

    turned = loop.http.patch("/controllers/quiet", json={"log_decisions": True})
    assert turned.status_code == 200 and turned.json()["log_decisions"] is True, turned.text
    answer = loop.decided("quiet", loop.rows[:3])
    ids = [d["decision_id"] for d in answer["decisions"]]
    assert all(ids) and len(set(ids)) == 3
    page = loop.http.get("/controllers/quiet/decisions", params={"limit": 2}).json()
    assert [d["id"] for d in page["decisions"]] == ids[::-1][:2]  # newest first
    older = loop.http.get("/controllers/quiet/decisions", params={"before": page["next_before"]})
    assert [d["id"] for d in older.json()["decisions"]] == [ids[0]]
    logged = page["decisions"][0]
    sent, decided = loop.rows[2], answer["decisions"][2]
    assert (logged["state"], logged["tools"]) == (sent["state"], sent["tools"])
    assert logged["version"] == 1
    assert (logged["action"], logged["abstain"]) == (decided["action"], decided["abstain"])
    assert logged["scores"] == pytest.approx(decided["scores"]) and logged["outcome"] is None

    assert loop.promote("loud", loop.trm, log_decisions=True).status_code == 201
    assert all(d["decision_id"] for d in loop.decided("loud", loop.rows[:2])["decisions"])
    loop.http.patch("/controllers/loud", json={"log_decisions": False})
    assert loop.decided("loud", loop.rows[:1])["decisions"][0]["decision_id"] is None


def test_outcomes_become_corpus_rows_a_train_run_learns_from(loop: Loop) -> None:
    assert loop.promote("loop", loop.gbdt, log_decisions=True).status_code == 201
    answer = loop.decided("loop", loop.rows[:40])
    ids = [d["decision_id"] for d in answer["decisions"]]
    # 30 succeeded, 6 failed, 4 never told; one success first reported as a failure.
    told = [
        {"decision_id": i, "success": n < 30, "reward": 1.0 if n < 30 else -0.5}
        for n, i in enumerate(ids[:36])
    ]
    first = loop.outcomes("loop", [{"decision_id": ids[0], "success": False, "notes": "retried"}])
    assert first.json() == {"recorded": 1, "replaced": 0}, first.text
    again = loop.outcomes("loop", told)
    assert again.json() == {"recorded": 36, "replaced": 1}, again.text
    params = {"with_outcomes": "true", "limit": 100}
    with_outcomes = loop.http.get("/controllers/loop/decisions", params=params).json()
    assert len(with_outcomes["decisions"]) == 36
    assert {d["id"]: d["outcome"]["success"] for d in with_outcomes["decisions"]}[ids[0]] is True

    source = {"type": "decision_log", "name": "live", "controller": "loop", "outcomes": "all"}
    spec = {
        "kind": "train",
        "trainer": "trm",
        "probe": True,
        "trm": {"hidden": 16},
        "corpus": {"sources": [source], "split": {"by": "row"}},
    }
    run = loop.svc.submit(spec)
    done = loop.svc.wait_status(run["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done.get("failure_reason")
    corpus = loop.svc.settings.run_dir(run["id"]) / CORPUS
    counted = json.loads((corpus / MANIFEST).read_text())["sources"][0]
    assert (counted["type"], counted["rows_read"], counted["rows_kept"]) == ("decision_log", 40, 36)
    assert counted["invalid"]["no_outcome"]["count"] == 4
    assert counted["kinds"] == {"failed_outcome": 6}
    critic = [json.loads(line) for line in (corpus / CRITIC_ROWS).read_text().splitlines()]
    failed = [r for r in critic if r["meta"].get("decision_id") in ids[30:36]]
    assert len(failed) == 6 and {r["meta"]["run"] for r in failed} == {"loop@v1"}
    assert all(r["meta"]["success"] is False and r["meta"]["reward"] == -0.5 for r in failed)

    only = {**source, "outcomes": "success_only", "versions": [1]}
    run = loop.svc.submit(
        {**spec, "corpus": {"sources": [only], "split": {"by": "row"}}, "dry_run": True}
    )
    assert loop.svc.wait_status(run["id"], "completed", "failed")["status"] == "completed"


def test_a_shadow_scores_beside_the_live_version_without_changing_its_answers(
    loop: Loop,
) -> None:
    assert loop.promote("pair", loop.trm).status_code == 201
    assert loop.promote("pair", loop.gbdt).status_code == 201
    loop.http.post("/controllers/pair/rollback", json={"version": 1})
    rows = loop.rows
    alone = loop.decided("pair", rows, version=1)["decisions"]
    other = loop.decided("pair", rows, version=2)["decisions"]
    set_ = loop.http.post("/controllers/pair/shadow", json={"version": 2})
    assert set_.status_code == 200 and set_.json()["shadow_version"] == 2, set_.text

    started = time.perf_counter()
    beside = loop.decided("pair", rows)
    print(f"60 rows with a shadow beside: {(time.perf_counter() - started) * 1000:.0f} ms")
    assert beside["version"] == 1
    assert [d["action"] for d in beside["decisions"]] == [d["action"] for d in alone]
    expected = sum(a["action"] == o["action"] for a, o in zip(alone, other, strict=True))
    report = loop.shown("pair")["shadow"]
    assert (report["version"], report["decisions"], report["agreed"]) == (2, 60, expected)
    assert 0 < expected < 60, "a trm and a gbdt of one probe step should disagree on some rows"
    assert report["agreement_rate"] == pytest.approx(expected / 60)

    ids = [d["decision_id"] for d in beside["decisions"]]
    agreed = [i for i, a, o in zip(ids, alone, other, strict=True) if a["action"] == o["action"]]
    reported = [{"decision_id": i, "success": i in agreed} for i in ids]
    assert loop.outcomes("pair", reported).status_code == 200
    report = loop.shown("pair")["shadow"]
    assert report["when_agreed"]["success_rate"] == 1.0
    assert report["when_disagreed"]["success_rate"] == 0.0
    assert report["when_disagreed"]["reported"] == 60 - expected

    short = loop.http.post(
        "/controllers/pair/promote-shadow", json={"min_decisions": 61, "min_agreement": 0.0}
    )
    assert short.status_code == 409 and "60 decisions" in short.json()["error"]["message"]
    assert "at least 61 decisions" in short.json()["error"]["message"]
    bound = {"min_decisions": 60, "min_agreement": expected / 60}
    promoted = loop.http.post("/controllers/pair/promote-shadow", json=bound)
    assert promoted.status_code == 200, promoted.text
    assert (promoted.json()["live_version"], promoted.json()["shadow"]) == (2, None)


def test_bad_outcomes_shadows_and_sources_are_refused_by_name(loop: Loop) -> None:
    assert loop.promote("strict", loop.gbdt, log_decisions=True).status_code == 201
    known = loop.decided("strict", loop.rows[:1])["decisions"][0]["decision_id"]
    cases: list[tuple[list[dict[str, Any]], int, str]] = [
        ([{"decision_id": known, "success": True, "reward": 1e9}], 422, "outcomes[0].reward"),
        ([{"decision_id": known}], 422, "outcomes[0].success"),
        ([{"decision_id": known, "success": True, "notes": "x" * 501}], 422, "outcomes[0].notes"),
        ([], 422, "outcomes"),
        (
            [{"decision_id": known, "success": True}, {"decision_id": "01NOPE", "success": True}],
            404,
            "outcomes[1].decision_id",
        ),
        ([{"decision_id": known, "success": True}] * 2, 422, "outcomes[1].decision_id"),
    ]
    for outcomes, status, field in cases:
        answer = loop.outcomes("strict", outcomes)
        assert answer.status_code == status, (outcomes, answer.text)
        assert field in [d["field"] for d in answer.json()["error"]["details"]], answer.text
    assert loop.http.get("/controllers/strict/decisions").json()["decisions"][0]["outcome"] is None
    # Another controller's decision is unknown here.
    assert loop.outcomes("quiet", [{"decision_id": known, "success": True}]).status_code == 404

    live = loop.http.post("/controllers/strict/shadow", json={"version": 1})
    assert live.status_code == 422 and "live version" in live.text
    missing = loop.http.post("/controllers/strict/shadow", json={"version": 5})
    assert missing.status_code == 404 and "no version 5" in missing.text
    none = loop.http.post("/controllers/strict/promote-shadow", json={})
    assert none.status_code == 409 and "no shadow" in none.text
    bound = loop.http.post("/controllers/strict/promote-shadow", json={"min_agreement": 1.5})
    assert bound.status_code == 422 and "min_agreement" in bound.text
    maybe = loop.http.patch("/controllers/strict", json={"log_decisions": "maybe"})
    assert maybe.status_code == 422 and "log_decisions" in maybe.text
    assert loop.http.get("/controllers/strict/decisions?limit=0").status_code == 422
    assert loop.http.get("/controllers/nobody/decisions").status_code == 404

    source = {"type": "decision_log", "name": "live", "controller": "Not A Name"}
    spec = {"kind": "train", "trainer": "gbdt", "corpus": {"sources": [source]}}
    answer = loop.http.post("/runs", json=spec)
    assert answer.status_code == 422, answer.text
    assert "corpus.sources[0].controller" in [d["field"] for d in answer.json()["error"]["details"]]
    unknown = loop.http.post(
        "/runs", json={**spec, "corpus": {"sources": [{**source, "controller": "nobody"}]}}
    )
    assert unknown.status_code == 422 and "no controller 'nobody'" in unknown.text
    assert unknown.json()["error"]["details"][0]["field"] == "corpus.sources[0].controller"


def test_the_cli_reports_outcomes_lists_decisions_and_sets_a_shadow(
    loop: Loop, tmp_path: Path
) -> None:
    def trm(*args: str) -> str:
        proc = run_cli(loop.svc, *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "version 1 is live" in trm("promote", loop.trm, "--as", "cli-loop", "--log-decisions")
    ids = [d["decision_id"] for d in loop.decided("cli-loop", loop.rows[:3])["decisions"]]
    assert "1 outcome(s) recorded" in trm(
        "outcomes", "cli-loop", "--decision", ids[0], "--success", "--reward", "2"
    )
    batch = tmp_path / "outcomes.jsonl"
    batch.write_text("\n".join(json.dumps({"decision_id": i, "success": False}) for i in ids[1:]))
    assert "2 outcome(s) recorded" in trm("outcomes", "cli-loop", "--file", str(batch))
    listed = trm("decisions", "cli-loop").splitlines()
    assert [line.split()[0] for line in listed] == ids[::-1]
    assert "success" in listed[-1] and "failure" in listed[0]
    trm("promote", loop.gbdt, "--as", "cli-loop")
    trm("rollback", "cli-loop", "1")
    assert "shadow v2: agreed on 0 of 0" in trm("shadow", "cli-loop", "2")
    assert "no shadow version" in trm("shadow", "cli-loop", "--clear")


def test_the_log_keeps_the_newest_rows_of_each_controller(migrated: Settings) -> None:
    """TRM_DECISION_LOG_KEEP: what the decision process trims the log to every PRUNE_S."""
    engine = make_engine(migrated.database_url)
    kept = {}
    for name in ("a", "b"):
        rows = [
            DecisionRecord(
                id=new_id(),
                name=name,
                version=1,
                state="s",
                tools=["x", "y"],
                action="x",
                scores=[0.6, 0.4],
                margin=0.2,
                abstain=False,
            )
            for _ in range(5)
        ]
        rows.sort(key=lambda r: r.id)
        record(engine, rows)
        kept[name] = [r.id for r in rows[-2:]][::-1]
    assert prune(engine, keep=2) == 6
    with Session(engine) as db:
        for name, newest in kept.items():
            assert [d.id for d in list_decisions(db, name, 10, None, None).decisions] == newest
    assert prune(engine, keep=2) == 0
    engine.dispose()
