"""routerBench with no router named trains one: the skill's published `routerbench-spec.json`
(`router_model: ""`) through `POST /runs?format=skill`, `POST /benches/routerbench?dry_run=true`
and `trm bench routerbench` without `--router`, over the real API and worker (one API and one
worker on SQLite for the module: each test looks only at the runs and controllers it made)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from sqlmodel import Session

from core.db import make_engine
from core.models import Run, utcnow
from tests.conftest import ROOT, Service, module_service
from tests.service.test_import_spec_upstream import bench_spec
from tests.stack import settings_of

# The published file's one mutation: the size of the router it trains.
MUTATION = {"batch_size": 4, "epochs": 1, "lr": 0.0002}
# Scored on fewer rollouts and train rows than the bench's defaults, to stay quick.
QUICK = {"num_examples": 2, "train_sample": 50}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with module_service("sqlite", tmp_path_factory.mktemp("bench-trains"), workers=1) as svc:
        yield svc


def test_published_routerbench_spec_trains_a_router_and_scores_it_beside_the_references(
    service: Service,
) -> None:
    settings = settings_of(service.env)
    published = {**bench_spec("routerbench"), **QUICK}
    queued = service.http.post("/runs", params={"format": "skill"}, json=published)
    assert queued.status_code == 202, queued.text
    run = queued.json()
    assert run["translated_spec"]["router"] == "train"
    assert run["translated_spec"]["router_train"] == MUTATION
    assert any("max_examples ignored" in w for w in run["warnings"]), run["warnings"]
    done = service.wait_status(run["id"], "completed", "failed", timeout=150)
    assert done["status"] == "completed", done.get("failure_reason")
    assert [s["name"] for s in done["stages"]] == ["resolve", "train_router", "evaluate"]

    card = service.http.get(f"/runs/{run['id']}/artifacts/scorecard.json").json()
    assert card["router"]["ref"] == "train" and card["baseline"]["ref"] == "none"
    assert card["router"]["model"] != card["baseline"]["model"]  # the trained one, not `none`
    assert set(card["references"]) == {"majority", "gbdt"}
    for side in ("router", "baseline"):
        assert card[side]["scores"]["anchor_score"]["n"] > 0
    config = json.loads(
        (settings.runs_dir / run["id"] / "trainer_config.resolved.json").read_text()
    )
    assert config["trainer"] == "trm"
    assert {k: config["config"][k] for k in MUTATION} == MUTATION
    assert (settings.runs_dir / run["id"] / "trainer" / "model.safetensors").is_file()

    # The router it trained is promoted by the bench's id and decides (asked of the decision
    # process directly: this API was started before it, so it forwards nowhere).
    decider = service.start_decider()
    promoted = service.http.post("/controllers", json={"name": "benched", "run_id": run["id"]})
    assert promoted.status_code == 201, promoted.text
    version = promoted.json()
    assert version["run_id"] == version["source_run_id"] == run["id"]
    assert version["trainer"] == "trm" and version["anchor_score"] == card["anchor_score"]
    row = {"state": "request: summarize the quarterly report", "tools": ["TRM_ONLY", "LLM_DIRECT"]}
    body = {"controller": "benched", "rows": [row]}
    decided = httpx.post(f"{decider}/decide", json=body, timeout=60)
    assert decided.status_code == 200, decided.text
    assert decided.json()["version"] == 1
    assert decided.json()["decisions"][0]["action"] in row["tools"]


def test_a_bench_that_scored_a_named_router_is_not_promoted_and_says_which_to_promote(
    service: Service,
) -> None:
    engine = make_engine(settings_of(service.env).database_url)
    with Session(engine) as db:
        spec = {"kind": "bench", "bench": "routerbench", "router": "01J00000000000000000000000"}
        bench = Run(
            kind="bench",
            status="completed",
            queue="gpu",
            spec=spec,
            spec_hash="b" * 64,
            finished_at=utcnow(),
        )
        db.add(bench)
        db.commit()
        bench_id = str(bench.id)
    engine.dispose()
    answer = service.http.post("/controllers", json={"name": "named", "run_id": bench_id})
    assert answer.status_code == 409, answer.text
    message = answer.json()["error"]["message"]
    assert "trained no router of its own" in message and "01J00000000000000000000000" in message
    assert service.http.get("/controllers/named").status_code == 404


def test_bench_without_a_router_plans_training_one_on_the_api_and_the_cli(
    service: Service,
) -> None:
    response = service.http.post("/benches/routerbench", params={"dry_run": "true"})
    assert response.status_code == 202, response.text
    router = response.json()["resolved"]["router"]
    assert router["ref"] == "train" and router["train"]["trainer"] == "trm"
    assert router["train"]["corpus"]["split"]["anchor"] == ["route-s1000-w8", "route-s1000-w9"]

    baseline = service.http.post("/benches/routerbench", json={"baseline": "train"})
    assert baseline.status_code == 422, baseline.text
    assert baseline.json()["error"]["details"][0]["field"] == "baseline"

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            *f"bench routerbench --dry-run --url {service.url}".split(),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["router"] == router

    skill_dry = service.http.post(
        "/runs", params={"format": "skill"}, json={**bench_spec("routerbench"), "dry_run": True}
    )
    assert skill_dry.status_code == 202, skill_dry.text
    for run_id in (response.json()["id"], skill_dry.json()["id"]):
        done = service.wait_status(run_id, "completed", "failed", timeout=60)
        assert done["status"] == "completed", done.get("failure_reason")
        stages = {s["name"]: s for s in done["stages"]}
        assert [s["status"] for s in stages.values()] == ["planned"] * 3
        assert "would train the router: trm" in json.dumps(stages["train_router"])
