"""kill -9 of the worker holding a hill-climb coordinator (slow: a few minutes on a CPU): the search
is resumed by another worker as attempt 2 and carries on from its ledger, with no duplicate ledger
row and no candidate run twice."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from core.settings import Settings
from tests.conftest import Service, wait_for

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)  # its own waits: 240 s to the kill, 400 s to the end
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_killed_coordinator_resumes_without_duplicates(
    service: Service, settings: Settings
) -> None:
    from tests.hillclimb.test_service import tiny_search

    # Three candidates: the kill comes while the second runs, so that attempt 2 both takes over
    # a candidate in flight and proposes one of its own.
    spec = tiny_search(settings.data_dir, max_candidates=3, parallelism=1)
    service.start_worker("worker-a")
    service.start_worker("worker-b")
    search = service.submit(spec)

    # The ledger's events per candidate are proposed, launched, finished: kill while one
    # candidate is launched and not finished, after another has finished.
    def in_flight() -> bool:
        events = Counter(r["event"] for r in service.ledger(search["id"]))
        return events["finished"] >= 1 and events["launched"] > events["finished"]

    wait_for(in_flight, timeout=240, what="a second candidate in flight")
    before = service.ledger(search["id"])
    holder = service.kill_worker_holding(search["id"])
    service.start_worker("worker-c")
    done = service.wait_status(search["id"], "completed", "failed", timeout=400)
    assert done["status"] == "completed", done
    assert done["attempt"] == 2
    assert [(a["worker_id"], a["outcome"]) for a in done["attempts"]][0] == (
        holder,
        "interrupted",
    )
    rows = service.ledger(search["id"])
    assert rows[: len(before)] == before  # attempt 2 carried on from the ledger, rewrote nothing
    assert max(Counter((r["candidate_id"], r["event"]) for r in rows).values()) == 1
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    proposed = [r["candidate_id"] for r in rows if r["event"] == "proposed"]
    finished = [r["candidate_id"] for r in rows if r["event"] == "finished"]
    assert len(proposed) == 3 and sorted(finished) == sorted(proposed), rows
    children = service.http.get("/runs", params={"parent": search["id"]}).json()["runs"]
    assert len(children) == len(proposed)  # one child run per candidate, none run twice
    launched = {r["candidate_id"]: r["run_id"] for r in rows if r["event"] == "launched"}
    assert sorted(launched.values()) == sorted(c["id"] for c in children)
    assert all(c["status"] == "completed" for c in children), children
    jsonl = (settings.runs_dir / search["id"] / "hillclimb_ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in jsonl] == [r["seq"] for r in rows]
