"""The dashboard in a real browser (Debian's Chromium, headless) against a real API and worker."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from core.db import make_engine
from core.models import Event, LedgerEntry, Run, utcnow
from core.settings import Settings
from tests.conftest import Service, TcpProxy
from tests.dashboard.conftest import screenshot

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

SELFTEST = {"kind": "selftest", "steps": 60, "step_seconds": 0.05}


def stored_events(settings: Settings, run_id: str) -> list[tuple[int, str]]:
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        rows = db.exec(
            select(Event.id, Event.type).where(Event.run_id == run_id).order_by(col(Event.id))
        ).all()
    engine.dispose()
    return [(int(i), t) for i, t in rows if i is not None]


def wait_run_status(page: Any, status: str, timeout_ms: int = 30_000) -> None:
    page.wait_for_selector(f"#run-status.status.{status}", timeout=timeout_ms)


def test_submitted_run_appears_in_the_table_and_its_card_goes_live_to_completed(
    service: Service, page: Any, tmp_path: Path
) -> None:
    page.goto(f"{service.url}/#/")
    page.wait_for_selector("#runs-empty:not([hidden])")
    earlier = service.submit({"kind": "selftest", "steps": 1, "step_seconds": 0})
    # the table polls: the run shows up without a reload
    page.wait_for_selector(f'tr[data-run="{earlier["id"]}"]')

    service.start_worker()
    page.click("a[data-nav=submit]")
    page.fill("#submit-json", json.dumps(SELFTEST))
    page.click("#submit-form button[type=submit]")
    page.wait_for_url("**/#/runs/*")
    run_id = page.url.rsplit("/", 1)[1]
    cards = []
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        cards.append(page.text_content("#run-card") or "")
        if (page.text_content("#run-status") or "") == "completed":
            break
        time.sleep(0.05)
    wait_run_status(page, "completed")
    page.wait_for_function(
        "document.querySelector('#run-card').textContent.includes(' completed ')"
    )
    card = page.text_content("#run-card") or ""
    assert run_id in card and "completed" in card
    assert any("running" in c and "100.0%" not in c for c in cards), "the card never showed a step"
    assert len({c for c in cards if c}) >= 3, "the card did not update while the run ran"
    # the loss plot has every step the worker reported
    page.wait_for_selector('#run-plots g[data-series="loss (loop)"][data-points="60"]')
    assert page.locator('#run-stages tr[data-stage="loop"] .status.completed').count() == 1
    page.locator("#run-artifacts a", has_text="summary.json").wait_for()
    assert page.locator("#run-cancel").is_hidden()
    screenshot(page, "run-page.png", tmp_path)

    page.click("a[data-nav=runs]")
    row = page.locator(f'tr[data-run="{run_id}"]')
    row.locator(".status.completed").wait_for()
    assert row.locator("td").nth(1).text_content() == "selftest"
    assert "100.0%" in (row.locator("td").nth(4).text_content() or "")
    page.select_option("#filter-status", "failed")
    row.wait_for(state="detached")
    assert page.errors == []


def test_sse_reconnect_after_a_network_drop_shows_no_gap(
    service: Service, proxy: TcpProxy, page: Any, settings: Settings
) -> None:
    service.start_worker()
    run = service.submit(SELFTEST)
    page.goto(f"{proxy.url}/#/runs/{run['id']}")
    page.wait_for_function("window.trmStream && window.trmStream.seen.length >= 5")
    proxy.cut()  # every connection of the page drops mid-stream
    page.wait_for_selector("#run-live[data-state=reconnecting]")
    time.sleep(0.8)  # the run goes on while the page is away
    proxy.restore()
    wait_run_status(page, "completed")
    page.wait_for_function("window.trmStream.ended")
    seen = page.evaluate("window.trmStream.seen")
    stored = stored_events(settings, run["id"])
    assert seen == [i for i, _ in stored]  # every event once, in order, across the drop
    assert page.evaluate("window.trmStream.reconnects") >= 1
    assert "reconnected" in (page.text_content("#run-live") or "")
    metrics = sum(1 for _, kind in stored if kind == "metric")
    page.wait_for_selector(f'#run-plots g[data-series="loss (loop)"][data-points="{metrics}"]')
    assert page.errors == []


def test_a_failed_run_shows_its_class_and_reason(service: Service, page: Any) -> None:
    service.start_worker()
    run = service.submit({**SELFTEST, "steps": 20, "fail_at_step": 5})
    page.goto(f"{service.url}/#/runs/{run['id']}")
    wait_run_status(page, "failed")
    failure = page.locator("#run-failure")
    failure.wait_for()
    found = service.run(run["id"])
    assert page.text_content("#run-failure-class") == found["failure_class"]
    assert "fail at step 5" in (page.text_content("#run-failure-reason") or "")
    stage = page.locator('#run-stages tr[data-stage="loop"]')
    assert stage.locator(".status.failed").count() == 1
    assert "fail at step 5" in (stage.text_content() or "")


def insert_search(settings: Settings) -> tuple[str, list[dict[str, Any]]]:
    """A hill-climb run and its ledger, written the way the search writes them."""
    plan = [  # (rung, decision, anchor, train, knob_diff)
        (0, "best", 0.61, 0.70, {"state_compression": "keys"}),
        (0, "discard", 0.58, 0.69, {"negative_rate": 0.5}),
        (0, "branch", 0.615, 0.72, {"recovery_rate": 0.2}),
        (0, "best", 0.66, 0.74, {"heldout_breadth": 2}),
        (0, "failed", None, None, {"state_compression": "minimal"}),
        (0, "discard", 0.64, 0.75, {"negative_rate": 1.0}),
        (0, "discard", 0.65, 0.73, {"recovery_rate": 0.4}),
        (1, "best", 0.69, 0.76, {"heldout_breadth": 3}),
        (1, "discard", 0.67, 0.78, {"namespace_normalization": True}),
        (1, "failed", None, None, {"source_mix": {"a": 0}}),
        (1, "discard", 0.68, 0.74, {"negative_rate": 0.25}),
        (2, "best", 0.72, 0.77, {"heldout_breadth": 4}),
    ]
    engine = make_engine(settings.database_url)
    now = utcnow()
    with Session(engine) as db:
        search = Run(
            kind="hillclimb",
            status="running",
            queue="cpu",
            name="routerBench climb",
            spec={"kind": "hillclimb", "base": {}, "max_candidates": 16},
            spec_hash="x" * 64,
            phase="candidates",
            percent=75.0,
            best_anchor=0.72,
            started_at=now - timedelta(minutes=9),
            card={
                "phase": "candidates",
                "candidate": "c13",
                "completed_count": 12,
                "total_candidates": 16,
                "best_anchor": 0.72,
                "best_train": 0.77,
                "best_gap": 0.05,
                "best_candidate": "c12",
                "percent": 75.0,
                "eta_s": 180.0,
            },
        )
        db.add(search)
        db.commit()
        seq, rows = 0, []
        for n, (rung, decision, anchor, train, diff) in enumerate(plan, start=1):
            start = now - timedelta(minutes=9) + timedelta(seconds=40 * n)
            common: dict[str, Any] = dict(
                search_id=search.id,
                candidate_id=f"c{n}",
                parent_id=f"c{max(1, n - 1)}",
                rung=rung,
                knob_diff=diff,
                knobs=diff,
            )
            seq += 1
            db.add(
                LedgerEntry(seq=seq, event="started", status="running", started_at=start, **common)
            )
            seq += 1
            gap = None if anchor is None or train is None else round(train - anchor, 3)
            row = LedgerEntry(
                seq=seq,
                event="finished",
                status="failed" if decision == "failed" else "completed",
                train_score=train,
                anchor_score=anchor,
                generalization_gap=gap,
                decision=decision,
                reason="trainer ran out of memory"
                if decision == "failed"
                else f"{decision} at rung {rung}",
                started_at=start,
                finished_at=start + timedelta(seconds=35),
                **common,
            )
            db.add(row)
            rows.append({"candidate_id": f"c{n}", "decision": decision, "rung": rung})
        seq += 1  # one candidate still training: no point yet
        db.add(
            LedgerEntry(
                seq=seq,
                search_id=search.id,
                candidate_id="c13",
                event="started",
                status="running",
                rung=2,
                started_at=now,
            )
        )
        db.commit()
        search_id = search.id
    engine.dispose()
    return search_id, rows


def test_hillclimb_plot_has_one_point_per_finished_candidate(
    service: Service, page: Any, settings: Settings, tmp_path: Path
) -> None:
    search_id, finished = insert_search(settings)
    page.goto(f"{service.url}/#/runs/{search_id}")
    page.wait_for_selector("svg.hillclimb .point")
    points = page.locator("svg.hillclimb .point")
    assert points.count() == len(finished)
    got = [points.nth(i).get_attribute("data-candidate") for i in range(points.count())]
    assert got == [row["candidate_id"] for row in finished]  # in ledger order
    decisions = [points.nth(i).get_attribute("data-decision") for i in range(points.count())]
    assert decisions == [row["decision"] for row in finished]
    assert page.locator("svg.hillclimb .rung-move").count() == 2  # rung 0→1, 1→2
    assert page.locator("svg.hillclimb path.best-so-far").count() == 1
    assert page.locator("#run-ledger tbody tr").count() == 2 * len(finished) + 1
    assert "cand  12/16" in (page.text_content("#run-card") or "")
    screenshot(page, "hillclimb-page.png", tmp_path)


def test_the_form_shows_the_422_next_to_the_bad_field(
    service: Service, page: Any, tmp_path: Path
) -> None:
    page.goto(f"{service.url}/#/submit")
    page.fill("#submit-json", json.dumps({"kind": "selftest", "steps": 0, "step_seconds": 0.1}))
    page.click("#submit-form button[type=submit]")
    error = page.locator('.field.invalid[data-field="steps"] .field-error')
    error.wait_for()
    assert "greater than or equal to 1" in (error.text_content() or "")
    assert "steps:" in (page.text_content("#submit-message") or "")
    assert page.locator(".field.invalid").count() == 1
    # a sample spec, one nested field edited in the field list: the message sits next to it
    page.select_option("#submit-sample", "train-routerbench-trm.json")
    seed = page.locator('.field[data-field="corpus.split.seed"] input')
    seed.fill("zero")
    seed.dispatch_event("change")
    assert '"seed": "zero"' in page.input_value("#submit-json")
    page.click("#submit-form button[type=submit]")
    nested = page.locator('.field.invalid[data-field="corpus.split.seed"] .field-error')
    nested.wait_for()
    assert "valid integer" in (nested.text_content() or "")
    assert page.locator(".field.invalid").count() == 1
    screenshot(page, "submit-form.png", tmp_path)
    assert page.url.endswith("#/submit")  # nothing was queued
    assert service.http.get("/runs").json()["runs"] == []


def test_with_a_token_the_page_asks_once_and_keeps_it_for_the_session(
    env: dict[str, str], migrated: Settings, tmp_path: Path, page: Any
) -> None:
    token = "s3cret-token"
    logs = tmp_path / "token-logs"
    logs.mkdir()
    svc = Service({**env, "TRM_API_TOKEN": token}, logs)
    svc.http.headers["Authorization"] = f"Bearer {token}"
    svc.start_api()
    try:
        run = svc.submit({"kind": "selftest", "steps": 1, "step_seconds": 0})
        page.goto(f"{svc.url}/#/")
        page.wait_for_selector("#token-dialog[open]")
        page.fill("#token-input", "wrong")
        page.click("#token-form button[type=submit]")
        page.wait_for_selector("#token-error:not([hidden])")  # refused: asked again, says why
        page.fill("#token-input", token)
        page.click("#token-form button[type=submit]")
        page.wait_for_selector(f'tr[data-run="{run["id"]}"]')
        page.reload()  # same tab: the token is kept
        page.click(f'a[href="#/runs/{run["id"]}"]')
        page.wait_for_function("window.trmStream && window.trmStream.seen.length > 0")
        assert page.locator("#token-dialog[open]").count() == 0
        # The card draws from the stream's first events: wait for it, not for the first event.
        page.wait_for_function(
            "id => (document.querySelector('#run-card')?.textContent || '').includes(id)",
            arg=run["id"],
        )
    finally:
        svc.stop()


def test_stages_show_their_counters_and_the_invalid_row_reasons(
    service: Service, page: Any, env: dict[str, str]
) -> None:
    rows = [
        {
            "state": {"x": i},
            "tools": ["left", "right"],
            "action": "left" if i % 2 else "right",
            "env": f"e{i % 3}",
            "run": "r",
            "episode": i,
        }
        for i in range(30)
    ]
    lines = [json.dumps(r) for r in rows] + [
        "not json",
        json.dumps({"state": {"x": 1}, "tools": ["a"], "action": "zzz"}),
        json.dumps({"tools": ["a"], "action": "a"}),
    ]
    data = Path(env["TRM_DATA_DIR"]) / "toy"
    data.mkdir(parents=True)
    (data / "rows.jsonl").write_text("\n".join(lines) + "\n")
    service.start_worker()
    spec = {
        "kind": "train",
        "dry_run": True,
        "corpus": {"sources": [{"type": "jsonl", "name": "toy", "path": str(data / "rows.jsonl")}]},
    }
    run = service.submit(spec)
    page.goto(f"{service.url}/#/runs/{run['id']}")
    wait_run_status(page, "completed")
    stage = page.locator('#run-stages tr[data-stage="prepare_corpus"]')
    for reason in ("bad_json 1", "missing_state 1", "action_not_in_tools 1"):
        stage.locator(".chip.bad", has_text=reason).wait_for()
    assert stage.locator(".status.planned").count() == 1
    assert "would read 33 rows" in (stage.text_content() or "")
    page.locator("#run-artifacts a", has_text="trainer_config.resolved.json").wait_for()


def insert_bench(settings: Settings) -> str:
    """A finished bench run and its scorecard, in the shape worker/evaluate writes it."""
    from worker.evaluate import scorecard as sc

    def side(ref: str, hits: dict[str, int]) -> dict[str, Any]:
        per_family = {
            f: {"anchor_score": sc.score([1.0] * k + [0.0] * (40 - k))} for f, k in hits.items()
        }
        anchor = sc.score(
            [1.0] * sum(hits.values()) + [0.0] * (40 * len(hits) - sum(hits.values()))
        )
        train = sc.score([1.0] * 90 + [0.0] * 30)
        scores = {
            "train_score": train,
            "anchor_score": anchor,
            "generalization_gap": sc.difference(train, anchor),
        }
        return {
            "ref": ref,
            **{k: v["value"] for k, v in scores.items()},
            "scores": scores,
            "per_family": per_family,
            "n": {"train": 120, "anchor": 40 * len(hits)},
        }

    baseline = side("none", {"route": 14, "tool": 20, "verify": 25})
    router = side("01ROUTER", {"route": 31, "tool": 27, "verify": 26})
    card = {
        "format": sc.FORMAT,
        "bench": "routerbench",
        "repeats": 1,
        **sc.headline(router),
        "baseline": baseline,
        "router": router,
        "delta": {"anchor_score": {"value": 0.2083, "n": 120, "ci95": [0.12, 0.29]}},
        "references": {
            "majority": {
                "model": "majority:route:TRM_ONLY",
                "anchor_score": sc.score([1.0] * 50 + [0.0] * 70),
                "delta": {"value": 0.2833, "n": 120, "ci95": [0.19, 0.37]},
                "mcnemar": {"router_only": 40, "reference_only": 6, "p_value": 0.000001},
            },
            "gbdt": {
                "model": "gbdt(rounds=80)",
                "anchor_score": sc.score([1.0] * 86 + [0.0] * 34),
                "delta": {"value": -0.0167, "n": 120, "ci95": [-0.07, 0.04]},
                "mcnemar": {"router_only": 5, "reference_only": 7, "p_value": 0.774414},
            },
        },
    }
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        run = Run(
            kind="bench",
            status="completed",
            queue="gpu",
            name="routerbench",
            spec={"kind": "bench", "bench": "routerbench"},
            spec_hash="b" * 64,
            phase="evaluate",
            percent=100.0,
            best_anchor=router["anchor_score"],
            started_at=utcnow() - timedelta(seconds=50),
            finished_at=utcnow(),
        )
        db.add(run)
        db.commit()
        run_id = run.id
    engine.dispose()
    run_dir = settings.run_dir(run_id)
    run_dir.mkdir(parents=True)
    (run_dir / "scorecard.json").write_text(json.dumps(card))
    return run_id


def test_a_bench_shows_baseline_vs_router_per_family_with_intervals(
    service: Service, page: Any, settings: Settings, tmp_path: Path
) -> None:
    run_id = insert_bench(settings)
    page.goto(f"{service.url}/#/runs/{run_id}")
    page.wait_for_selector("svg.bench")
    page.wait_for_selector("#run-live[data-state=ended]")  # no reconnect loop on a finished run
    families = page.locator("svg.bench g.family")
    names = [families.nth(i).get_attribute("data-family") for i in range(families.count())]
    assert names == ["anchor (all)", "route", "tool", "verify"]
    assert page.locator("svg.bench .side.baseline .interval").count() == 4
    assert page.locator("svg.bench .side.router .interval").count() == 4
    anchor = page.locator('#run-scorecard tr[data-score="anchor score"]')
    text = anchor.text_content() or ""
    assert "0.700" in text and "+0.208" in text and "[0.120, 0.290]" in text
    assert page.locator('#run-scorecard tr[data-score="route · anchor"]').count() == 1
    # What a user would pick instead, beside the router.
    gbdt = page.locator('#run-scorecard tr[data-reference="gbdt"]').text_content() or ""
    assert "0.717" in gbdt and "-0.017" in gbdt and "[-0.070, 0.040]" in gbdt and "0.774" in gbdt
    assert page.locator('#run-scorecard tr[data-reference="majority"]').count() == 1
    screenshot(page, "bench-page.png", tmp_path)


def test_the_cancel_button_stops_a_running_run(service: Service, page: Any) -> None:
    service.start_worker()
    run = service.submit({**SELFTEST, "steps": 600})
    page.goto(f"{service.url}/#/runs/{run['id']}")
    wait_run_status(page, "running")
    page.click("#run-cancel")
    wait_run_status(page, "cancelled")
    page.wait_for_selector("#run-live[data-state=ended]")
    assert page.locator("#run-cancel").is_hidden()
