"""The `datasets` MCP tool through the MCP SDK's own client: an agent on the machine that holds a
folder of logs hands it over (stdio `trm mcp`), reads what a train run would take from it, lists
and deletes it; the API's own /mcp refuses to read paths on the API host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Service, run_async
from tests.mcp.test_mcp_server import TOKEN, call, error_of, over_http, over_stdio
from worker.envs import generate

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def guarded(env: dict[str, str], migrated: Any, tmp_path: Path) -> Iterator[Service]:
    svc = Service({**env, "TRM_API_TOKEN": TOKEN}, tmp_path / "logs")
    svc.http.headers["Authorization"] = f"Bearer {TOKEN}"
    svc.start_api()
    yield svc
    svc.stop()


def test_an_agent_hands_over_a_folder_of_logs_and_reads_what_a_run_would_take(
    guarded: Service, tmp_path: Path
) -> None:
    logs = tmp_path / "agent-logs"
    generate(logs, families=["route"], worlds=2, episodes=6, seed=0)

    async def scenario() -> None:
        async with over_stdio(guarded) as session:
            pushed = await call(session, "datasets", action="push", name="agent", path=str(logs))
            assert pushed["dataset"]["name"] == "agent" and pushed["replaced"] is False
            source = {"type": "trm_play_root", "name": "agent", "dataset": "agent"}
            assert pushed["show"]["sources"] == [source]
            assert set(pushed["show"]["families"]) == {"route"}
            shown = await call(session, "datasets", action="show", name="agent")
            assert shown["rows"] == pushed["show"]["rows"] > 0 and shown["complete"]
            listed = await call(session, "datasets", action="list")
            assert [d["name"] for d in listed] == ["agent"]
            again = await error_of(session, "datasets", action="push", name="agent", path=str(logs))
            assert "replace" in again
            replaced = await call(
                session, "datasets", action="push", name="agent", path=str(logs), replace=True
            )
            assert replaced["replaced"] is True
            nowhere = await error_of(
                session, "datasets", action="push", name="x", path=str(tmp_path / "missing")
            )
            assert "no such file or folder" in nowhere
            assert "name" in await error_of(session, "datasets", action="show")
            deleted = await call(session, "datasets", action="delete", name="agent")
            assert deleted["name"] == "agent"
            assert await call(session, "datasets", action="list") == []
        async with over_http(f"{guarded.url}/mcp") as session:
            refused = await error_of(
                session,
                "datasets",
                action="push",
                name="server",
                path=str(guarded.settings.data_dir.parent),
            )
            assert "trm data push" in refused and "inside the API" in refused
            assert await call(session, "datasets", action="list") == []

    run_async(scenario())
    assert not (guarded.settings.data_dir / "datasets" / "server").exists()
