"""What the run page shows of a run with long names, one-point series and byte counters: it fits
the window (no sideways scroll at 1280 or 390 px), plots only what has two points or more, and
says sizes in decimal units (1 GB = 10^9 bytes, three significant digits)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import Session

from core.db import make_engine
from core.events import Publisher
from core.models import Run, Stage, utcnow
from core.settings import Settings
from tests.conftest import Service

pytestmark = pytest.mark.parametrize("shared_service", ["sqlite"], indirect=True)


@pytest.fixture
def service(shared_service: Service) -> Service:
    """Every test here opens the pages of runs it inserted itself: one API for all."""
    return shared_service


@pytest.fixture
def settings(shared_service: Service) -> Settings:
    return shared_service.settings


LONG_NAME = "routerbench-" + "x" * 188  # 200 characters, no place to break
LONG_ARTIFACT = "eval/" + "predictions_" * 16 + "y" * 3 + ".jsonl"  # 200 characters
LONG_ERROR = "CUDA out of memory while scoring " + "z" * 300
PEAK_RSS = 2_147_483_648
FITS = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"


def insert_failed_bench(settings: Settings) -> str:
    """A failed bench run as the worker leaves it: usage, a failed stage, metric events (loss at
    two steps, the anchor score at one) and an artifact with a 200-character name."""
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        run = Run(
            kind="bench",
            status="failed",
            queue="gpu",
            name=LONG_NAME,
            spec={"kind": "bench", "bench": "routerbench"},
            spec_hash="c" * 64,
            phase="evaluate",
            percent=80.0,
            failure_class="oom",
            failure_reason=LONG_ERROR,
            usage={"wall_seconds": 51.2, "peak_rss_bytes": PEAK_RSS, "peak_vram_bytes": None},
            started_at=utcnow() - timedelta(seconds=60),
            finished_at=utcnow(),
        )
        db.add(run)
        db.commit()
        run_id = run.id
        db.add(
            Stage(
                run_id=run_id,
                name="evaluate",
                status="failed",
                started_at=utcnow() - timedelta(seconds=50),
                completed_at=utcnow(),
                manifest={
                    "counters": {"peak_vram_bytes": 25_000_000_000, "rows": 120},
                    "error": {"class": "oom", "message": LONG_ERROR},
                },
            )
        )
        db.commit()
    publisher = Publisher(engine, None, settings)
    publisher.publish(run_id, "metric", {"stage": "train", "step": 1, "loss": 2.5})
    publisher.publish(run_id, "metric", {"stage": "train", "step": 2, "loss": 1.9})
    publisher.publish(run_id, "metric", {"stage": "evaluate", "step": 40, "anchor_score": 0.72})
    engine.dispose()
    artifact = settings.run_dir(run_id) / LONG_ARTIFACT
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_bytes(b"x" * 1234)
    return run_id


def test_long_names_and_errors_never_scroll_the_page_sideways(
    service: Service, page: Any, settings: Settings
) -> None:
    run_id = insert_failed_bench(settings)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{service.url}/#/runs/{run_id}")
        page.locator("#run-artifacts a", has_text=LONG_ARTIFACT).wait_for()
        page.locator('#run-stages tr[data-stage="evaluate"] .error').wait_for()
        page.wait_for_selector("#run-failure:not([hidden])")
        assert LONG_NAME in (page.text_content("#run-title") or "")
        scroll = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert page.evaluate(FITS), f"run page at {width}px is {scroll[0]}px wide"
        # the cut artifact name keeps the whole path as its tooltip
        link = page.locator("#run-artifacts a", has_text=LONG_ARTIFACT)
        assert link.get_attribute("title") == LONG_ARTIFACT
        page.goto(f"{service.url}/#/")
        page.wait_for_selector(f'tr[data-run="{run_id}"]')
        page.wait_for_function(
            f"document.querySelector('tr[data-run=\"{run_id}\"]').textContent.includes('x'.repeat(50))"
        )
        assert page.evaluate(FITS), f"runs page at {width}px scrolls sideways"
        page.goto(f"{service.url}/#/submit")
        page.select_option("#submit-sample", "train-routerbench-trm.json")
        page.wait_for_selector('.field[data-field="corpus.split.seed"]')
        assert page.evaluate(FITS), f"submit page at {width}px scrolls sideways"
    assert page.errors == []


def test_one_point_is_said_as_text_and_sizes_read_in_gb(
    service: Service, page: Any, settings: Settings
) -> None:
    run_id = insert_failed_bench(settings)
    page.goto(f"{service.url}/#/runs/{run_id}")
    # loss has two steps: drawn; the anchor score has one: a sentence, no plot line
    page.wait_for_selector('#run-plots svg g[data-series="loss (train)"][data-points="2"] path')
    assert page.locator('#run-plots svg g[data-series="anchor_score"]').count() == 0
    assert page.locator("#run-plots svg").count() == 1
    single = page.locator("#run-plots p.plot-single")
    assert single.text_content() == "eval accuracy · anchor_score 0.72 at step 40 (one point)"
    # sizes: usage, stage counters and artifacts in decimal units, never raw bytes
    page.wait_for_selector("#run-facts dt")
    facts = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#run-facts dt')]"
        ".map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))"
    )
    assert str(PEAK_RSS) not in str(facts)
    assert facts["peak rss"] == "2.15 GB"
    stage = page.locator('#run-stages tr[data-stage="evaluate"]')
    stage.locator(".chip", has_text="rows 120").wait_for()
    assert "peak_vram_bytes 25.0 GB" in (stage.text_content() or "")
    artifact = page.locator("#run-artifacts li", has_text=LONG_ARTIFACT)
    artifact.wait_for()
    assert (artifact.text_content() or "").endswith(".jsonl1.23 KB")
    assert page.errors == []


def test_a_search_with_one_finished_candidate_is_text_not_a_plot(
    service: Service, page: Any, settings: Settings
) -> None:
    from tests.dashboard.test_dashboard import insert_search

    search_id, _ = insert_search(settings)
    engine = make_engine(settings.database_url)
    with engine.begin() as conn:  # only the first candidate's rows, with a long reason
        conn.exec_driver_sql(
            "DELETE FROM ledger_entries WHERE search_id = ? AND candidate_id != 'c1'", (search_id,)
        )
        conn.exec_driver_sql(
            "UPDATE ledger_entries SET reason = ? WHERE search_id = ?", (LONG_ERROR, search_id)
        )
    engine.dispose()
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(f"{service.url}/#/runs/{search_id}")
    page.wait_for_selector("#run-ledger tbody tr >> nth=1")
    page.wait_for_selector("#run-plots > *")
    assert page.locator("#run-plots svg").count() == 0
    single = page.locator('#run-plots p.plot-single[data-plot="hillclimb"]')
    assert single.text_content() == "anchor score per candidate · c1 0.61 (best) (one point)"
    assert page.evaluate(FITS), "a long ledger reason scrolls the page sideways"
