"""A search whose spec says `promote` makes its best candidate a live controller version as it
ends: on the real service (API, worker, child train runs), read back through the registry."""

from __future__ import annotations

import json

import pytest

from core.db import make_engine
from core.promotion import promote_search_best
from core.schemas.hillclimb import PromoteBest
from core.settings import Settings
from tests.conftest import Service
from tests.hillclimb.test_service import tiny_search

pytestmark = [pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]


def test_a_search_that_asks_promotes_its_best_once_and_says_so(
    service: Service, settings: Settings
) -> None:
    service.start_worker("worker-a")
    service.start_worker("worker-b")
    asked = {"name": "route-picker", "abstain_margin": 0.05}
    # Both candidates train at once: one after the other, on cores shared with other tests, they
    # took most of the wait.
    spec = tiny_search(settings.data_dir, max_candidates=2, parallelism=2, promote=asked)
    search = service.submit(spec)
    done = service.wait_status(search["id"], "completed", "failed", timeout=150)
    assert done["status"] == "completed", done

    summary = json.loads((settings.run_dir(search["id"]) / "search_summary.json").read_text())
    promotion = summary["promotion"]
    assert promotion["promoted"] is True, promotion
    assert promotion["name"] == "route-picker" and promotion["version"] == 1
    assert promotion["candidate"] == summary["best_candidate"]
    assert promotion["run_id"] == summary["best_run"]

    shown = service.http.get("/controllers/route-picker")
    assert shown.status_code == 200, shown.text
    live = shown.json()["live"]
    assert live["version"] == 1 and live["live"] is True
    assert live["run_id"] == summary["best_run"]
    assert live["source_run_id"] == search["id"]
    assert live["candidate_id"] == summary["best_candidate"]
    assert live["promoted_by"] == f"hill-climb {search['id']}"
    assert live["abstain_margin"] == 0.05

    # The finalize stage run again (a restarted coordinator) finds its version: no second one.
    engine = make_engine(settings.database_url)
    again = promote_search_best(
        engine,
        settings,
        search["id"],
        (summary["best_run"], summary["best_candidate"]),
        PromoteBest(name="route-picker"),
    )
    engine.dispose()
    assert again.version == 1
    assert len(service.http.get("/controllers/route-picker").json()["versions"]) == 1


def test_a_promote_block_with_a_bad_name_is_refused_at_submit_naming_the_field(
    service: Service, settings: Settings
) -> None:
    spec = tiny_search(settings.data_dir, promote={"name": "Not A Name"})
    response = service.http.post("/runs", json=spec)
    assert response.status_code == 422, response.text
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert any(f.startswith("promote.name") for f in fields), fields
    assert service.http.get("/runs").json()["runs"] == []
