"""External benches in the bench menu, over the real API and worker: `routellm` lists, refuses a
missing data folder at submit naming where to put it, and scores a trained router with
RouteLLM's APGR beside its baselines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.settings import Settings
from tests.conftest import Service
from tests.external.test_routellm import checkout

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def tiny_routellm(root: Path) -> Path:
    """A RouteLLM-shaped folder: 8 MMLU subjects of 30 prompts and 40 GSM8K problems, where
    the strong model alone is right on the prompts that say `hard`."""
    rng = np.random.default_rng(0)

    def answers(hard: bool) -> list[str]:
        return [str(not hard and rng.random() < 0.9), str(rng.random() < 0.95)]

    subjects = {
        f"subject_{i}": [
            [f"question {i}.{j} {'hard' if j % 3 == 0 else 'easy'} topic {j % 5}",
             *answers(j % 3 == 0)]
            for j in range(30)
        ]
        for i in range(8)
    }  # fmt: skip
    gsm8k = [[f"problem {j} {'hard' if j % 3 == 0 else 'easy'}", *answers(j % 3 == 0)]
             for j in range(40)]  # fmt: skip
    return checkout(root, subjects, gsm8k)


@pytest.mark.slow
@SQLITE_ONLY
def test_a_routellm_bench_scores_a_trained_router_by_apgr(
    service: Service, settings: Settings
) -> None:
    menu = {b["name"]: b for b in service.http.get("/benches").json()["benches"]}
    assert menu["routellm"]["external"] == "routellm"
    assert menu["routellm"]["defaults"]["data"] == "routellm"

    # No data yet: refused at submit, saying where to put it.
    missing = service.http.post("/benches/routellm", json={"router": "01J00000000000000000000001"})
    assert missing.status_code == 422, missing.text
    message = missing.json()["error"]["message"]
    assert str(settings.data_dir / "routellm") in message and "lm-sys/RouteLLM" in message

    tiny_routellm(settings.data_dir / "routellm")
    unrouted = service.http.post("/benches/routellm")
    assert unrouted.status_code == 422, unrouted.text
    assert "scores a trained router" in unrouted.json()["error"]["message"]
    elsewhere = service.http.post("/benches/routellm", json={"router": "01J00000000000000000000001",
                                                             "data": "nowhere"})  # fmt: skip
    assert elsewhere.status_code == 422
    assert str(settings.data_dir / "nowhere") in elsewhere.json()["error"]["message"]
    # The CLI's --data reaches the same check.
    cli = subprocess.run(
        [sys.executable, "-m", "app.cli", "bench", "routellm", "--router",
         "01J00000000000000000000001", "--data", "nowhere", "--url", service.url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode != 0 and str(settings.data_dir / "nowhere") in cli.stderr, cli.stderr
    from worker.external.routellm import corpus_spec, locate

    split = corpus_spec(locate(settings.data_dir / "routellm"))["split"]
    train = {
        "kind": "train", "trainer": "gbdt", "gbdt": {"n_estimators": 20},
        "corpus": {"sources": [{"type": "routellm", "name": "routellm", "path": "routellm"}],
                   "split": split, "dedupe": False},
        "evaluate": {"train_sample": 20, "episodes": 1},
    }  # fmt: skip
    trained = service.submit(train)
    service.start_worker()
    done = service.wait_status(trained["id"], "completed", "failed", timeout=90)
    assert done["status"] == "completed", done.get("failure_reason")
    # The gbdt router's features of most gain reach its summary, each said in words.
    summary = json.loads((settings.run_dir(trained["id"]) / "summary.json").read_text())
    top = summary["top_features"]
    assert top and top[0]["gain"] >= top[-1]["gain"] > 0
    assert all(f["feature"] and f["meaning"] for f in top)

    planned = service.http.post(
        "/benches/routellm", params={"dry_run": "true"}, json={"router": trained["id"]}
    )
    assert planned.status_code == 202, planned.text
    resolved = planned.json()["resolved"]
    assert resolved["data"] == str(settings.data_dir / "routellm")
    assert resolved["router"]["policy"]["type"] == "gbdt"

    response = service.http.post("/benches/routellm", json={"router": trained["id"]})
    assert response.status_code == 202, response.text
    bench = service.wait_status(response.json()["id"], "completed", "failed", timeout=90)
    assert bench["status"] == "completed", bench.get("failure_reason")
    card = json.loads((settings.run_dir(bench["id"]) / "scorecard.json").read_text())
    assert card["external"] == "routellm" and card["metric"] == "apgr"
    router = card["router"]["scores"]["anchor_score"]
    low, high = router["ci95"]
    assert low <= router["value"] <= high and router["n"] == 60  # two unseen subjects
    assert set(card["router"]["per_family"]) == {"mmlu-unseen-subjects", "gsm8k"}
    assert card["baseline"]["ref"] == "random"
    # A router that learned `hard` recovers more of the gap than random routing.
    assert router["value"] > card["baseline"]["anchor_score"]
    methods = {(m["anchors"], m["method"]) for m in card["methods"]}
    for name in ("random", "oracle", "tfidf-logreg", "always-weak", "router"):
        assert ("mmlu-unseen-subjects", name) in methods
    curve = next(m["curve"] for m in card["methods"] if m["method"] == "router")
    assert curve[0][0] == 0.0 and curve[-1][0] == 1.0
    assert bench["best_anchor"] == card["router"]["anchor_score"]
