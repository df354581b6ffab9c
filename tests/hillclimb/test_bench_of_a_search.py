"""A bench of a finished hill-climb's `:final` and `:root`, from the summary.json the search
itself wrote: the dry run resolves them as the real bench does (the dry run answered 422 "has no
'best_run'" while the real call was accepted)."""

from __future__ import annotations

import json

import pytest

from core.settings import Settings
from tests.conftest import Service
from tests.hillclimb.test_service import tiny_search
from tests.stack import wait_for

pytestmark = [pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]


def test_a_dry_run_bench_of_a_search_final_resolves_as_the_real_bench_does(
    service: Service, settings: Settings
) -> None:
    service.start_worker()
    search = service.submit(tiny_search(settings.data_dir, max_candidates=1))
    done = service.wait_status(search["id"], "completed", "failed", timeout=120)
    assert done["status"] == "completed", done
    summary = json.loads((settings.run_dir(search["id"]) / "summary.json").read_text())
    best = summary["search"]["best_run"]
    assert best and best == summary["search"]["root_candidate_run"]  # one candidate: the root

    body = {"router": f"{search['id']}:final", "baseline": f"{search['id']}:root"}
    dry = service.http.post("/benches/routerbench", params={"dry_run": "true"}, json=body)
    assert dry.status_code == 202, dry.text
    planned = dry.json()["resolved"]
    model = str(settings.run_dir(best) / "trainer")
    assert planned["router"]["ref"] == f"{search['id']}:final"
    assert planned["router"]["policy"]["path"] == planned["baseline"]["policy"]["path"] == model

    real = service.http.post("/benches/routerbench", json=body)
    assert real.status_code == 202, real.text
    bench = real.json()["id"]
    # The worker's first stage resolves and records the bench; scoring it is not the point here.
    written = settings.run_dir(bench) / "bench.resolved.json"
    wait_for(written.is_file, 60, "the real bench to resolve its sides")
    resolved = json.loads(written.read_text())
    for side in ("router", "baseline"):
        assert resolved[side]["policy"] == planned[side]["policy"], side
    service.http.post(f"/runs/{bench}/cancel")  # 409 when it already ended: either is fine
