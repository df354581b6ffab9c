"""The bench menu over the real API: GET /benches, POST /benches/{name}?dry_run=true."""

from __future__ import annotations

import json

import pytest

from core.settings import Settings
from tests.conftest import Service

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@SQLITE_ONLY
def test_menu_lists_the_shipped_benches(service: Service) -> None:
    names = {b["name"] for b in service.http.get("/benches").json()["benches"]}
    assert {"routerbench", "primehub-envs", "primehub-baseline"} <= names
    missing = service.http.post("/benches/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


@SQLITE_ONLY
def test_dry_run_bench_returns_the_resolved_config_and_plans_its_stages(
    service: Service, settings: Settings
) -> None:
    response = service.http.post("/benches/routerbench", params={"dry_run": "true"})
    assert response.status_code == 202, response.text
    run = response.json()
    assert run["kind"] == "bench" and run["dry_run"] is True
    resolved = run["resolved"]
    assert resolved["bench"] == "routerbench" or resolved.get("name") == "routerbench"
    assert "route-s1000-w8" in json.dumps(resolved)  # the fixed anchor worlds
    service.start_worker()
    done = service.wait_status(run["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done
    assert [s["status"] for s in done["stages"]] == ["planned", "planned", "planned"]
    assert (settings.runs_dir / run["id"] / "bench.resolved.json").is_file()
