"""Hermes's own MCP client drives the whole path a Hermes user takes, with no shell on the server:
a folder of play logs pushed as a data set, a router trained from it, benched, hill-climbed, and
the search's `:final` benched. The real hermes-agent (its `register_mcp_servers` and tool
registry, tests/hermes/hermes_mcp_driver.py) talks to `trm mcp` over stdio, which talks to a real
API and worker; the test plays the model's part, reading only what the tools answer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Service
from tests.hermes.test_skill import hermes_python
from worker.envs import generate

HERMES_PYTHON = hermes_python()
DRIVER = Path(__file__).with_name("hermes_mcp_driver.py")
TOOL_BUDGET = 8_000  # characters of tool definitions Hermes sends the model each turn
# A bench an agent sizes to answer in a minute: fewer rollouts and train rows scored.
QUICK_BENCH = {"baseline": "none", "episodes": 1, "train_sample": 20}
RUN_ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")

pytestmark = [
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
    pytest.mark.skipif(
        HERMES_PYTHON is None,
        reason="hermes-agent is not installed (scripts/hermes_env.sh makes .venv-hermes)",
    ),
]


class Hermes:
    """One Hermes process with the trm MCP server registered; `call` is one tool call."""

    def __init__(self, svc: Service, home: Path) -> None:
        env = {k: v for k, v in svc.env.items() if k.startswith("TRM_")}
        server = {
            "command": sys.executable,
            "args": ["-m", "app.cli", "mcp"],
            "env": {**env, "TRM_URL": svc.url, "PYTHONPATH": str(ROOT)},
            "timeout": 600,
        }
        assert HERMES_PYTHON is not None
        self.proc = subprocess.Popen(
            [HERMES_PYTHON, str(DRIVER), json.dumps({"trm": server})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(home)},
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.listing = json.loads(self.proc.stdout.readline())

    def call(self, tool: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        started = time.monotonic()
        self.proc.stdin.write(json.dumps({"tool": tool, "args": args}) + "\n")
        self.proc.stdin.flush()
        text = json.loads(self.proc.stdout.readline())["result"]
        print(f"{tool}: {time.monotonic() - started:.1f} s", file=sys.stderr)
        answer = json.loads(text)
        # Hermes hands the model {"result": <the tool's text>} or {"error": ...}.
        assert "error" not in answer, f"{tool}: {answer}"
        inner = answer["result"]
        return json.loads(inner) if isinstance(inner, str) and inner[:1] in "[{" else inner

    def wait(self, run_id: str) -> dict[str, Any]:
        """wait_for_run until it says the run finished, as an agent would loop."""
        for _ in range(20):
            answer = self.call("wait_for_run", run_id=run_id, timeout_s=120)
            if answer["finished"]:
                return dict(answer)
        raise AssertionError(f"run {run_id} did not finish: {answer}")

    def scorecard(self, run_id: str) -> dict[str, Any]:
        """scorecard.json as read_artifact pages it to the agent, page by page."""
        text, offset = "", 0
        for _ in range(20):
            page = self.call("read_artifact", run_id=run_id, path="scorecard.json", offset=offset)
            if isinstance(page, dict):
                return page
            body, _, tail = str(page).partition("\n[truncated: showing bytes ")
            text += body
            if tail:  # "<offset>-<end> of <total>[; next: offset=<end>]]"
                shown, _, rest = tail.partition(" of ")
                offset, total = int(shown.split("-")[1]), int(re.split(r"[;\]]", rest)[0])
            if not tail or offset >= total:
                return dict(json.loads(text))
        raise AssertionError(f"{run_id}: scorecard.json did not end in 20 pages")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def hermes(service: Service, tmp_path: Path) -> Iterator[Hermes]:
    home = tmp_path / "hermes-home"
    home.mkdir()
    agent = Hermes(service, home)
    yield agent
    agent.close()


@pytest.mark.timeout(900)
def test_hermes_drives_logs_to_train_bench_hillclimb_and_final_bench(
    service: Service, hermes: Hermes, tmp_path: Path
) -> None:
    assert {"mcp__trm__datasets", "mcp__trm__submit_run", "mcp__trm__start_bench"} <= set(
        hermes.listing["tools"]
    )
    assert hermes.listing["definitions_chars"] <= TOOL_BUDGET + 2_000  # Hermes's own wrapping
    service.start_worker()

    # "Here is a folder of play logs": on the agent's machine, not under the server's DATA_DIR.
    logs = tmp_path / "my-play-logs"
    generate(logs, families=["route"], worlds=4, episodes=4, seed=3)
    pushed = hermes.call("datasets", action="push", path=str(logs), name="play")
    assert pushed["dataset"]["name"] == "play"
    source = pushed["show"]["sources"][0]
    assert source["type"] == "trm_play_root" and pushed["show"]["rows"] > 0

    base = {
        "trainer": "trm",
        "corpus": {
            "sources": [{"type": source["type"], "name": "route", "dataset": "play"}],
            "split": {"by": "env", "anchor": ["route-s3-w3"]},
        },
        "trm": {"epochs": 10, "hidden": 16, "n_recursions": 1},
    }
    train = hermes.call("submit_run", spec={"kind": "train", "name": "from my logs", **base})
    train_id = train["run"]["id"]
    done = hermes.wait(train_id)
    assert done["run"]["status"] == "completed", done

    bench = hermes.call("start_bench", name="routerbench", router=train_id, **QUICK_BENCH)
    bench_done = hermes.wait(bench["run"]["id"])
    assert bench_done["run"]["status"] == "completed", bench_done
    scorecard = hermes.scorecard(bench["run"]["id"])
    assert scorecard["router"]["ref"] == train_id and scorecard["anchor_score"] is not None

    search_spec = {
        "kind": "hillclimb",
        "name": "climb my logs",
        "base": base,
        "start_rung": 3,
        "knobs": {"namespace_normalization": [False], "recovery_rate": [None, 0.2]},
        "max_candidates": 1,
        "max_generalization_gap": 1.0,
    }
    search = hermes.call("submit_run", spec=search_spec)
    search_id = search["run"]["id"]
    search_done = hermes.wait(search_id)
    assert search_done["run"]["status"] == "completed", search_done
    ledger = hermes.call("get_ledger", run_id=search_id)  # compact: a line a candidate
    root = ledger["candidates"][0]
    assert root["candidate"] == "c000" and root["decision"] == "best", ledger
    assert root["anchor_score"] is not None and ledger["events"] > len(ledger["candidates"])

    final = hermes.call(
        "start_bench", name="routerbench", router=f"{search_id}:final", **QUICK_BENCH
    )
    final_done = hermes.wait(final["run"]["id"])
    assert final_done["run"]["status"] == "completed", final_done
    final_scores = hermes.scorecard(final["run"]["id"])
    summary = service.http.get(f"/runs/{search_id}/artifacts/summary.json").json()
    best = summary["search"]["best_run"]
    assert RUN_ID.fullmatch(best) and final_scores["router"]["ref"] == f"{search_id}:final"
    assert best in json.dumps(final_scores["router"])  # the search's best run was benched
    assert final_scores["anchor_score"] is not None
