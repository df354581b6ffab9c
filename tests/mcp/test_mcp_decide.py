"""An agent promotes a trained run and asks the controller for decisions through `trm mcp` (the
MCP SDK's own client over stdio), with a token: the API forwards to the real decision process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.conftest import Service, run_async
from tests.mcp.test_mcp_server import TOKEN, call, error_of, over_stdio
from tests.probe_runs import ProbeRuns
from tests.service.test_controllers import ROW

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def trained(
    env: dict[str, str],
    migrated: Settings,
    tmp_path: Path,
    route_corpus: Path,
    probe_runs: ProbeRuns,
) -> Iterator[tuple[Service, str]]:
    """A guarded service with the decision process and a completed trm run (the session's probe
    run, trained through the service): the service and the run's id."""
    svc = Service({**env, "TRM_API_TOKEN": TOKEN}, tmp_path / "logs")
    svc.http.headers["Authorization"] = f"Bearer {TOKEN}"
    try:
        run_id = probe_runs.install(migrated, route_corpus)["trm"]
        svc.start_decider()
        svc.start_api()
        yield svc, run_id
    finally:
        svc.stop()


def test_an_agent_promotes_gets_decisions_reports_outcomes_and_reads_them_back_over_mcp(
    trained: tuple[Service, str],
) -> None:
    promoted, run_id = trained

    async def scenario() -> dict[str, Any]:
        async with over_stdio(promoted) as session:
            missing = await error_of(
                session, "promote", name="router", run_id="01J00000000000000000000000"
            )
            made = await call(session, "promote", name="router", run_id=run_id)
            listed = await call(session, "list_controllers")
            assert [c["name"] for c in listed["controllers"]] == ["router"]
            assert listed["controllers"][0]["live"]["promoted_by"] == "token"
            answer = await call(session, "decide", name="router", rows=[ROW, ROW])
            bad = await error_of(
                session, "decide", name="router", rows=[ROW, {"state": "s", "tools": []}]
            )
            unknown = await error_of(session, "decide", name="nobody", rows=[ROW])

            on = promoted.http.patch("/controllers/router", json={"log_decisions": True})
            assert on.status_code == 200, on.text
            logged = await call(session, "decide", name="router", rows=[ROW, ROW])
            first, second = (d["decision_id"] for d in logged["decisions"])
            outcome = {"decision_id": first, "success": True, "reward": 0.5}
            reported = await call(session, "report_outcomes", name="router", outcomes=[outcome])
            stranger = await error_of(
                session,
                "report_outcomes",
                name="router",
                outcomes=[{"decision_id": "nope", "success": False}],
            )
            listed_back = await call(session, "list_decisions", name="router")
            waiting = await call(session, "list_decisions", name="router", with_outcomes=False)
            live_shadow = await error_of(session, "set_shadow", name="router", version=1)
            cleared = await call(session, "set_shadow", name="router", version=None)
            return {
                "missing": missing,
                "made": made,
                "answer": answer,
                "bad": bad,
                "unknown": unknown,
                "ids": [first, second],
                "reported": reported,
                "stranger": stranger,
                "listed": listed_back,
                "waiting": waiting,
                "live_shadow": live_shadow,
                "cleared": cleared,
            }

    seen = run_async(scenario())
    assert "404" in seen["missing"] and "no run" in seen["missing"]
    assert seen["made"]["version"] == 1 and seen["made"]["run_id"] == run_id
    answer = seen["answer"]
    assert answer["version"] == 1 and len(answer["decisions"]) == 2
    assert all(d["action"] in ROW["tools"] for d in answer["decisions"])
    assert "rows[1].tools" in seen["bad"]
    assert "nobody" in seen["unknown"] and "404" in seen["unknown"]

    first, second = seen["ids"]
    assert seen["reported"] == {"recorded": 1, "replaced": 0}
    assert "outcomes[0].decision_id" in seen["stranger"] and "404" in seen["stranger"]
    # Only the decisions decided while logging is on are listed, each with its outcome or none.
    listed = {d["id"]: d for d in seen["listed"]["decisions"]}
    assert set(listed) == {first, second}
    assert listed[first]["outcome"] == {"success": True, "reward": 0.5}
    assert listed[second]["outcome"] is None
    assert listed[first]["action"] in ROW["tools"] and "scores" not in listed[first]
    assert [d["id"] for d in seen["waiting"]["decisions"]] == [second]
    assert "version" in seen["live_shadow"] and "live version" in seen["live_shadow"]
    assert seen["cleared"]["shadow_version"] is None
