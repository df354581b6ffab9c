"""`trm mcp` through the MCP SDK's own client (`ClientSession`), over stdio and over streamable
HTTP, against a live API and worker with a token: what an agent such as Hermes sees."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from core.settings import Settings
from tests.conftest import ROOT, Service, run_async
from tests.hermes.test_skill import hermes_bin
from tests.stack import create_database, drop_database, free_port, wait_for

TOKEN = "mcp-s3cret"
TOOLS = {
    "submit_run",
    "start_bench",
    "get_run",
    "get_card",
    "wait_for_run",
    "cancel_run",
    "list_runs",
    "list_benches",
    "read_artifact",
    "get_ledger",
    "list_controllers",
    "promote",
    "decide",
    "report_outcomes",
    "list_decisions",
    "set_shadow",
    "datasets",
}


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """SQLite only: the server is an HTTP client, the database behind the API is not its
    concern (the API's own tests run both)."""
    url = create_database("sqlite", tmp_path)
    yield url
    drop_database(url)


@pytest.fixture
def guarded(env: dict[str, str], migrated: Any, tmp_path: Path) -> Iterator[Service]:
    svc = Service({**env, "TRM_API_TOKEN": TOKEN}, tmp_path / "logs")
    svc.http.headers["Authorization"] = f"Bearer {TOKEN}"
    svc.start_api()
    svc.start_worker()
    yield svc
    svc.stop()


def stdio_params(svc: Service, token: str | None) -> StdioServerParameters:
    env = {k: v for k, v in svc.env.items() if k != "TRM_API_TOKEN"}
    env["TRM_URL"] = svc.url
    if token is not None:
        env["TRM_API_TOKEN"] = token
    return StdioServerParameters(
        command=sys.executable, args=["-m", "app.cli", "mcp"], env=env, cwd=str(ROOT)
    )


@asynccontextmanager
async def over_stdio(svc: Service, token: str | None = TOKEN) -> AsyncIterator[ClientSession]:
    async with (
        stdio_client(stdio_params(svc, token)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_http(url: str, token: str | None = TOKEN) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **args: Any) -> Any:
    result = await session.call_tool(tool, args)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.isError, f"{tool} answered an error: {text}"
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


async def error_of(session: ClientSession, tool: str, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    assert result.isError, f"{tool} should have failed: {result.content}"
    return str(result.content[0].text)  # type: ignore[union-attr]


def definition(tool: Any) -> str:
    """A tool as an agent receives it each turn: name, description and input schema."""
    return json.dumps(
        {"name": tool.name, "description": tool.description, "inputSchema": tool.inputSchema}
    )


async def finish(session: ClientSession, run_id: str, rounds: int = 4) -> dict[str, Any]:
    """wait_for_run until the run is finished, as an agent does (each call ends before 300 s)."""
    for _ in range(rounds):
        answer = await call(session, "wait_for_run", run_id=run_id, timeout_s=120)
        if answer["finished"]:
            return dict(answer)
    raise AssertionError(f"run {run_id} not finished: {answer}")


def test_stdio_agent_lists_tools_runs_routerbench_and_reads_the_scorecard(
    guarded: Service,
) -> None:
    async def scenario() -> None:
        async with over_stdio(guarded) as session:
            listed = (await session.list_tools()).tools
            assert {t.name for t in listed} == TOOLS
            assert all(t.inputSchema.get("type") == "object" for t in listed)
            # What an agent such as Hermes sends its model every turn: name, description and
            # input schema of every tool (29.4k characters when submit_run carried the schema).
            size = sum(len(definition(t)) for t in listed)
            assert size < 8000, {t.name: len(definition(t)) for t in listed}
            submit = next(t for t in listed if t.name == "submit_run")
            spec_text = json.dumps(submit.inputSchema["properties"]["spec"])
            assert "trm://schemas/run-spec" in spec_text and "routerbench" in spec_text
            uris = {str(r.uri) for r in (await session.list_resources()).resources}
            assert {"trm://benches", "trm://schemas/run-spec", "trm://schemas/bench"} <= uris
            menu = await session.read_resource("trm://benches")  # type: ignore[arg-type]
            assert "routerbench" in menu.contents[0].text  # type: ignore[union-attr]
            schema = await session.read_resource("trm://schemas/run-spec")  # type: ignore[arg-type]
            assert "hillclimb" in schema.contents[0].text  # type: ignore[union-attr]
            init = session.get_server_capabilities()
            assert init is not None and init.prompts is not None
            prompts = {p.name: p for p in (await session.list_prompts()).prompts}
            assert set(prompts) == {"train-router", "hill-climb", "bench-run", "decide"}
            assert [a.name for a in prompts["bench-run"].arguments or []] == ["run_id", "bench"]
            steps = await session.get_prompt("bench-run", {"run_id": "RUN-X"})
            text = steps.messages[0].content.text  # type: ignore[union-attr]
            assert 'start_bench(name="routerbench", router="RUN-X"' in text
            # Each prompt's ready spec is one the API accepts (dry run: planned, nothing trained).
            for name in ("train-router", "hill-climb"):
                shown = await session.get_prompt(name)
                line = shown.messages[0].content.text.split("submit_run(spec=")[1]  # type: ignore[union-attr]
                spec = json.JSONDecoder().raw_decode(line)[0]
                planned = await call(session, "submit_run", spec={**spec, "dry_run": True})
                assert planned["run"]["dry_run"] is True and planned["replayed"] is False

            # routerBench dry run: resolved and planned, then followed to the end.
            args = {"name": "routerbench", "router": "none", "baseline": "none", "dry_run": True}
            started = await call(session, "start_bench", **args)
            run_id = started["run"]["id"]
            assert started["replayed"] is False
            again = await call(session, "start_bench", **args)
            # A retried call is the same run, and says so with the original's creation time.
            assert again["run"]["id"] == run_id and again["replayed"] is True
            assert started["run"]["created_at"] in again["note"]
            done = await finish(session, run_id)
            assert done["run"]["status"] == "completed", done
            assert run_id in done["card"]
            compact = await session.call_tool("get_run", {"run_id": run_id})
            whole = await session.call_tool("get_run", {"run_id": run_id, "full": True})
            small = compact.content[0].text  # type: ignore[union-attr]
            large = whole.content[0].text  # type: ignore[union-attr]
            assert len(small) < 1500 < len(large), (len(small), len(large))
            assert json.loads(small)["stages"] and "spec" in json.loads(large)
            resolved = await call(
                session, "read_artifact", run_id=run_id, path="bench.resolved.json"
            )
            assert resolved["split"]["anchor"]

            # A real (small) bench: the untrained router against itself, scored on CPU.
            spec = {"kind": "bench", "bench": "routerbench", "router": "none", "baseline": "none"}
            real = await call(session, "submit_run", spec=spec)
            retried = await call(session, "submit_run", spec=spec)
            assert retried["run"]["id"] == real["run"]["id"] and retried["replayed"] is True
            done = await finish(session, real["run"]["id"])
            assert done["run"]["status"] == "completed", done
            assert "scorecard.json" in done["next"]
            card = await call(
                session, "read_artifact", run_id=real["run"]["id"], path="scorecard.json"
            )
            assert card["router"]["n"]["anchor"] > 0

            # A bad spec: the API's error, naming the field, as a tool error.
            text = await error_of(session, "submit_run", spec={"kind": "selftest", "steps": 0})
            body = json.loads(text)
            assert body["status"] == 422 and "steps" in text, text

        # No token, then a wrong one: the tool error says 401 and how to set the token.
        for token in (None, "wrong"):
            async with over_stdio(guarded, token=token) as session:
                text = await error_of(session, "list_runs")
                assert "401" in text and "TRM_API_TOKEN" in text, text

    run_async(scenario())


def test_a_cancelled_run_is_replayed_out_loud_and_rerun_makes_a_new_one(guarded: Service) -> None:
    """The same arguments after a cancel return the cancelled run, saying so; its `next` points
    at rerun=true (it said "submit again", which returned the same run: an agent looped)."""

    async def scenario() -> None:
        async with over_http(f"{guarded.url}/mcp") as session:
            spec = {"kind": "selftest", "steps": 2000, "step_seconds": 0.05}
            first = await call(session, "submit_run", spec=spec)
            run_id = first["run"]["id"]
            stopped = await call(session, "cancel_run", run_id=run_id)
            assert "rerun=true" in stopped["next"] or "wait_for_run" in stopped["next"]
            done = await finish(session, run_id)
            assert done["run"]["status"] == "cancelled", done
            assert "rerun=true" in done["next"] and "submit again" not in done["next"]
            again = await call(session, "submit_run", spec=spec)
            assert again["run"]["id"] == run_id and again["replayed"] is True
            assert again["run"]["status"] == "cancelled" and "rerun=true" in again["next"]
            assert first["run"]["created_at"] in again["note"]
            fresh = await call(session, "submit_run", spec=spec, rerun=True)
            keyed = await call(session, "submit_run", spec=spec, idempotency_key="mine-1")
            ids = {run_id, fresh["run"]["id"], keyed["run"]["id"]}
            assert len(ids) == 3 and not fresh["replayed"] and not keyed["replayed"]
            for new in (fresh, keyed):
                await call(session, "cancel_run", run_id=new["run"]["id"])
            listed = await call(session, "list_runs", kind="selftest")
            assert {r["id"] for r in listed["runs"]} == ids

    run_async(scenario())


def test_http_mount_and_standalone_serve_the_same_tools_behind_the_token(
    guarded: Service, settings: Settings
) -> None:
    mount = f"{guarded.url}/mcp"
    refused = httpx.post(mount, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    port = free_port()
    standalone = guarded.spawn(
        "mcp-http",
        *f"mcp --http --port {port}".split(),
        extra_env={"TRM_URL": guarded.url, "TRM_API_TOKEN": ""},
    )
    wait_for(lambda: _answers(port), 60, "trm mcp --http to listen")
    # A web page that rebinds a name to 127.0.0.1 is refused: its Host header gives it away.
    rebound = httpx.post(
        f"http://127.0.0.1:{port}/mcp",
        headers={"Host": "evil.example:80"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert rebound.status_code == 421 and "Host" in rebound.text, rebound.text

    async def scenario() -> None:
        async with over_http(mount) as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            spec = {"kind": "selftest", "steps": 3, "step_seconds": 0.01}
            started = await call(session, "submit_run", spec=spec, idempotency_key="mcp-http-1")
            again = await call(session, "submit_run", spec=spec, idempotency_key="mcp-http-1")
            assert again["run"]["id"] == started["run"]["id"]
            done = await finish(session, started["run"]["id"])
            assert done["run"]["status"] == "completed", done
            run_id = started["run"]["id"]
            summary = await call(
                session, "read_artifact", run_id=run_id, path="summary.json", max_bytes=40
            )
            assert "[truncated: showing bytes 0-40 of" in summary and "offset=40" in summary
            # Paging with the offset it names gives the whole file back, byte for byte.
            whole = guarded.http.get(f"/runs/{run_id}/artifacts/summary.json").text
            pages, offset = [], 0
            while True:
                page = await call(
                    session,
                    "read_artifact",
                    run_id=run_id,
                    path="summary.json",
                    max_bytes=64,
                    offset=offset,
                )
                if not isinstance(page, str) or "[truncated" not in page:
                    pages.append(page if isinstance(page, str) else json.dumps(page))
                    break
                text, _, note = page.rpartition("\n[truncated: showing bytes ")
                pages.append(text)
                if "next: offset=" not in note:
                    break
                offset = int(note.split("next: offset=")[1].rstrip("]"))
            assert "".join(pages) == whole
            past = await call(
                session,
                "read_artifact",
                run_id=run_id,
                path="summary.json",
                offset=len(whole.encode()) + 10,
            )
            assert "past the end" in past
            # A page of a large file costs the API the page, not the file: six reads of a
            # 96 MiB artifact (each took its whole size, and kept it, before ranged reads).
            big = settings.run_dir(run_id) / "big.log"
            big.write_bytes(b"x" * (96 << 20))
            api = psutil.Process(guarded.api.pid)  # type: ignore[union-attr]
            before = api.memory_info().rss
            for k in range(6):
                page = await call(
                    session, "read_artifact", run_id=run_id, path="big.log", offset=k << 20
                )
                assert f"of {96 << 20}; next: offset=" in page
            assert api.memory_info().rss - before < 48 << 20
            text = await error_of(session, "get_run", run_id="no-such-run")
            assert json.loads(text)["status"] == 404
        # The standalone server forwards the caller's Authorization header to the API.
        async with over_http(f"http://127.0.0.1:{port}/mcp") as session:
            benches = await call(session, "list_benches")
            assert "routerbench" in json.dumps(benches)
        async with over_http(f"http://127.0.0.1:{port}/mcp", token=None) as session:
            assert "401" in await error_of(session, "list_benches")

    try:
        run_async(scenario())
    finally:
        guarded.terminate(standalone)


def test_http_beyond_loopback_lends_no_token_and_checks_host_and_origin(
    guarded: Service,
) -> None:
    """`trm mcp --http` on a wildcard bind with the API's token in its environment: a caller
    without that token, a rebound Host or a foreign Origin gets nothing (each got 200 and the
    run list when the server lent its token and checked names on loopback binds only)."""
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            *f"mcp --http --host 0.0.0.0 --port {free_port()}".split(),
        ],
        env={**guarded.env, "TRM_URL": guarded.url, "TRM_API_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert refused.returncode == 2 and "TRM_API_TOKEN" in refused.stderr, refused.stderr

    port = free_port()
    server = guarded.spawn(
        "mcp-wild",
        *f"mcp --http --host 0.0.0.0 --port {port} --allow-host trm-box.lan".split(),
        extra_env={"TRM_URL": guarded.url, "TRM_API_TOKEN": TOKEN},
    )
    wait_for(lambda: _answers(port), 60, "trm mcp --http --host 0.0.0.0 to listen")
    url = f"http://127.0.0.1:{port}/mcp"
    listing = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "list_runs", "arguments": {}},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    bearer = {"Authorization": f"Bearer {TOKEN}"}

    def post(**headers: str) -> httpx.Response:
        return httpx.post(url, json=listing, headers={**accept, **headers}, timeout=30)

    try:
        for sent in ({}, {"Authorization": "Bearer wrong"}):
            answer = post(**sent)
            assert answer.status_code == 401 and "next_cursor" not in answer.text, answer.text
        rebound = post(**bearer, Host="evil.example")
        assert rebound.status_code == 421, rebound.text
        foreign = post(**bearer, Origin="http://evil.example")
        assert foreign.status_code == 403, foreign.text
        named = post(**bearer, Host=f"trm-box.lan:{port}", Origin=f"http://trm-box.lan:{port}")
        assert named.status_code == 200 and "next_cursor" in named.text, named.text

        async def scenario() -> None:
            async with over_http(url) as session:
                assert "runs" in await call(session, "list_runs")

        run_async(scenario())
    finally:
        guarded.terminate(server)


def _answers(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
        return True
    except httpx.TransportError:
        return False


# hermes-agent pins exact versions (pydantic, cryptography, ...) that are not ours: it lives in a
# venv of its own (scripts/hermes_env.sh makes .venv-hermes), or `hermes` on PATH.
HERMES = hermes_bin()


@pytest.mark.skipif(
    HERMES is None,
    reason="hermes-agent is not installed (scripts/hermes_env.sh, or `hermes` on PATH)",
)
def test_hermes_mcp_test_passes_against_trm_mcp(guarded: Service, tmp_path: Path) -> None:
    params = stdio_params(guarded, TOKEN)
    home = tmp_path / "hermes"
    home.mkdir()
    config = {
        "mcp_servers": {
            "trm": {
                "command": params.command,
                "args": params.args,
                "env": {"TRM_URL": guarded.url, "TRM_API_TOKEN": TOKEN},
            }
        }
    }
    (home / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    out = subprocess.run(
        [str(HERMES), "mcp", "test", "trm"],
        env={**params.env, "HERMES_HOME": str(home)},  # type: ignore[dict-item]
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "wait_for_run" in out.stdout
