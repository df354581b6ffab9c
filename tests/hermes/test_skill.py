"""skills/trm-trainer as Hermes runs it: the frontmatter fields its loader reads, and each command
executed in a fresh shell (Hermes keeps nothing between terminal commands) against a live API and
worker with a token."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, Service, module_service

SKILL = ROOT / "skills" / "trm-trainer" / "SKILL.md"
TOKEN = "skill-s3cret"
TERMINAL = re.compile(r" (completed|failed|cancelled) ")


def frontmatter_and_body() -> tuple[dict[str, Any], str]:
    text = SKILL.read_text(encoding="utf-8")
    _, head, body = text.split("---\n", 2)
    return yaml.safe_load(head), body


def commands() -> list[str]:
    """Every shell command of the skill and its references, one per ```sh block."""
    found = []
    for path in [SKILL, *sorted((SKILL.parent / "references").glob("*.md"))]:
        found += re.findall(r"```sh\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
    return [block.strip() for block in found]


def test_frontmatter_has_the_fields_hermes_reads() -> None:
    meta, _ = frontmatter_and_body()
    assert meta["name"] == "trm-trainer"
    # Hermes shows its model the first 57 characters: the skill's reason to exist must be there.
    assert "routerBench" in meta["description"][:50]
    assert len(meta["description"]) <= 1024
    assert meta["platforms"] and all(p in ("linux", "macos", "windows") for p in meta["platforms"])
    env = {e["name"]: e for e in meta["required_environment_variables"]}
    assert set(env) == {"TRM_URL", "TRM_API_TOKEN"}
    for entry in env.values():
        assert isinstance(entry["prompt"], str) and entry["prompt"]
        assert isinstance(entry["help"], str) and isinstance(entry["required_for"], str)
    assert not env["TRM_URL"].get("optional") and env["TRM_API_TOKEN"]["optional"] is True
    hermes = meta["metadata"]["hermes"]
    assert hermes["requires_toolsets"] == ["terminal"]
    assert "routerbench" in hermes["tags"] and isinstance(hermes["related_skills"], list)
    assert "requires" not in hermes  # the old place Hermes never read


def test_every_command_stands_alone() -> None:
    found = commands()
    assert len(found) >= 5
    for command in found:
        assert "=(" not in command and "${AUTH" not in command, command  # no shell arrays
        # `trm` sends the token itself: no command names it, none talks HTTP by hand.
        assert "curl" not in command and "TRM_API_TOKEN" not in command, command
        assert command.startswith(': "${TRM_URL:?set TRM_URL}"; '), command
        if "trm submit" in command:
            assert "--idempotency-key" in command and "sha256sum" in command, command


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """An API that asks for TOKEN and one worker, on SQLite, shared by the module's tests: each
    looks only at the runs it started (a bench, a hill-climb)."""
    root = tmp_path_factory.mktemp("skill")
    with module_service("sqlite", root, workers=1, env={"TRM_API_TOKEN": TOKEN}) as svc:
        yield svc


def fresh_shell(
    command: str, url: str, token: str | None = TOKEN
) -> subprocess.CompletedProcess[str]:
    """What Hermes's terminal tool does: a new shell, only the exported skill variables."""
    # `trm` installed beside Hermes: this project's own client, first on PATH.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "TRM_URL": url}
    if token is not None:
        env["TRM_API_TOKEN"] = token
    return subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=300
    )


def the(needle: str) -> str:
    (command,) = [c for c in commands() if needle in c]
    return command


def test_routerbench_starts_is_followed_to_the_end_and_a_retry_is_the_same_run(
    guarded: Service,
) -> None:
    start = the('"bench":"routerbench"')
    # The skill's one-liner trains its router at `trm demo`'s size (about 2 minutes here); the
    # same command with a one-epoch, narrow router and fewer scored rows still trains in the run.
    assert '"router":"train"}' in start
    small = '"router_train":{"epochs":1,"hidden":16,"batch_size":64},"episodes":1,"train_sample":50'
    start = start.replace('"router":"train"}', f'"router":"train",{small}}}')
    first = fresh_shell(start, guarded.url)
    assert first.returncode == 0, first.stderr + first.stdout
    run_id = first.stdout.split()[0]
    again = fresh_shell(start, guarded.url)
    assert again.returncode == 0 and again.stdout.split()[0] == run_id

    # Without the token the API's refusal is shown and the command fails.
    refused = fresh_shell(start, guarded.url, token=None)
    assert refused.returncode != 0 and "set the TRM_API_TOKEN variable" in refused.stderr, refused

    poll = the("trm watch").replace("RUN=RUN_ID", f"RUN={run_id}")
    deadline = time.monotonic() + 600
    while True:
        shown = fresh_shell(poll, guarded.url)
        assert shown.returncode == 0, shown.stderr + shown.stdout
        top = shown.stdout.splitlines()[0]
        assert run_id in top
        if TERMINAL.search(top) or time.monotonic() > deadline:
            break
    assert " completed " in top, shown.stdout
    assert guarded.run(run_id)["status"] == "completed"
    done = fresh_shell(the("trm show").replace("RUN=RUN_ID", f"RUN={run_id}"), guarded.url)
    assert done.returncode == 0 and done.stdout.startswith("completed"), done
    card = fresh_shell(the("scorecard.json").replace("RUN_ID", run_id), guarded.url)
    assert card.returncode == 0, card
    scorecard = json.loads(card.stdout)
    # The trained router, scored beside the untrained baseline and the two references.
    assert scorecard["router"]["n"]["anchor"] > 0 and scorecard["baseline"]["n"]["anchor"] > 0
    assert {"majority", "gbdt"} <= set(scorecard["references"]), scorecard["references"]
    runs = guarded.http.get("/runs", params={"kind": "bench"}).json()
    assert [r["id"] for r in runs["runs"]] == [run_id]  # the retry started nothing


def hermes_bin() -> str | None:
    """`hermes`: on PATH, or in the venv scripts/hermes_env.sh makes."""
    local = ROOT / ".venv-hermes" / "bin" / "hermes"
    return shutil.which("hermes") or (str(local) if local.exists() else None)


def hermes_python() -> str | None:
    """The interpreter hermes-agent is installed in: $HERMES_PYTHON, or the one beside `hermes`."""
    candidates = [os.environ.get("HERMES_PYTHON", "")]
    if hermes := hermes_bin():
        candidates.append(str(Path(hermes).resolve().parent / "python"))
    for python in filter(None, candidates):
        probe = [python, "-c", "import tools.skills_tool"]
        if Path(python).exists() and subprocess.run(probe, capture_output=True).returncode == 0:
            return python
    return None


HERMES_PYTHON = hermes_python()
PROBE = """
import json, os
from tools.skills_tool import skills_list, skill_view
listed = {s["name"]: s for s in json.loads(skills_list())["skills"]}
view = json.loads(skill_view("trm-trainer"))
print(json.dumps({"listed": sorted(listed), "description": listed["trm-trainer"]["description"],
                  "missing": view["missing_required_environment_variables"],
                  "status": view["readiness_status"]}))
"""


@pytest.mark.skipif(
    HERMES_PYTHON is None,
    reason="hermes-agent is not installed (scripts/hermes_env.sh, `hermes` on PATH, HERMES_PYTHON)",
)
def test_hermes_own_loader_lists_the_skill_and_its_missing_variable(tmp_path: Path) -> None:
    shutil.copytree(SKILL.parent, tmp_path / "skills" / "trm-trainer")  # where Hermes installs it
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HERMES_HOME": str(tmp_path)}
    for extra, missing, status in (
        ({"TRM_URL": "http://127.0.0.1:8000"}, [], "available"),
        ({}, ["TRM_URL"], "setup_needed"),
    ):
        done = subprocess.run(
            [str(HERMES_PYTHON), "-c", PROBE],
            env={**base, **extra},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout.splitlines()[-1])
        assert seen["listed"] == ["trm-trainer"]
        assert "routerBench" in seen["description"][:50]
        assert seen["missing"] == missing and seen["status"] == status


SCAN = """
import json, sys
from pathlib import Path
from tools.skills_guard import scan_skill, should_allow_install
result = scan_skill(Path(sys.argv[1]), source="community")
print(json.dumps({"verdict": result.verdict, "allowed": should_allow_install(result)[0],
                  "findings": [f"{f.file}:{f.line} {f.pattern_id}" for f in result.findings]}))
"""

# `hermes skills install URL` asks each source in turn; the ones before the direct-URL source
# (skills.sh, GitHub) retry api.github.com with backoff, ~45 s without a network. The install
# keeps Hermes's command line and its direct-URL source, the one that takes a SKILL.md URL.
INSTALL = """
import sys
import tools.skills_hub as hub
hub.create_source_router = lambda auth=None: [hub.UrlSource()]
from hermes_cli.main import main
sys.argv = ["hermes", "skills", "install", sys.argv[1], "--yes"]
sys.exit(main())
"""


@pytest.mark.skipif(
    HERMES_PYTHON is None,
    reason="hermes-agent is not installed (scripts/hermes_env.sh, `hermes` on PATH, HERMES_PYTHON)",
)
def test_hermes_skills_guard_finds_the_skill_safe() -> None:
    done = subprocess.run(
        [str(HERMES_PYTHON), "-c", SCAN, str(SKILL.parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["verdict"] == "safe" and seen["allowed"] is True, seen["findings"]


@pytest.fixture
def skill_url() -> Iterator[str]:
    """skills/ served over HTTP on this host, as a user's own web server would."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(SKILL.parent.parent))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/trm-trainer/SKILL.md"
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(
    HERMES_PYTHON is None,
    reason="hermes-agent is not installed (scripts/hermes_env.sh, `hermes` on PATH, HERMES_PYTHON)",
)
def test_hermes_skills_install_from_a_url_puts_the_skill_where_hermes_reads_it(
    tmp_path: Path, skill_url: str
) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "HERMES_HOME": str(tmp_path),
        # Hermes refuses private addresses unless told; the server here is on loopback.
        "HERMES_ALLOW_PRIVATE_URLS": "true",
        "TRM_URL": "http://localhost:8000",
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [str(HERMES_PYTHON), "-c", INSTALL, skill_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Verdict: SAFE" in out, out[-3000:]
    installed = tmp_path / "skills" / "trm-trainer"
    assert (installed / "SKILL.md").read_bytes() == SKILL.read_bytes(), out[-3000:]
    for ref in (SKILL.parent / "references").glob("*.md"):
        assert (installed / "references" / ref.name).read_bytes() == ref.read_bytes()
    listed = subprocess.run(
        [str(HERMES_PYTHON), "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    seen = json.loads(listed.stdout.splitlines()[-1])
    assert "trm-trainer" in seen["listed"] and seen["status"] == "available", seen


QUICK = """
import json
from hermes_cli.config import load_config
from gateway.config import load_gateway_config
from tools.environments.local import _sanitize_subprocess_env
print(json.dumps({"cli": load_config()["quick_commands"],
                  "gateway": load_gateway_config().quick_commands,
                  "env": sorted(k for k in _sanitize_subprocess_env(
                      {"TRM_URL": "u", "TRM_API_TOKEN": "t"}) if k.startswith("TRM_"))}))
"""


@pytest.mark.skipif(
    HERMES_PYTHON is None,
    reason="hermes-agent is not installed (scripts/hermes_env.sh, `hermes` on PATH, HERMES_PYTHON)",
)
def test_docs_quick_command_is_accepted_by_hermes_and_runs_the_skill_one_liner(
    tmp_path: Path,
) -> None:
    docs = (ROOT / "docs" / "hermes.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "quick_commands" in b]
    (tmp_path / "config.yaml").write_text(block, encoding="utf-8")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HERMES_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(HERMES_PYTHON), "-c", QUICK], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    # Hermes lowercases the typed command before looking it up (CLI and gateway alike).
    typed = "/trm-routerBench".lower().lstrip("/")
    for loaded in (seen["cli"], seen["gateway"]):
        assert loaded[typed]["type"] == "exec"
        assert loaded[typed]["command"] == the('"bench":"routerbench"')
    # The exec command's environment keeps the skill's variables (Hermes drops only its own keys).
    assert seen["env"] == ["TRM_API_TOKEN", "TRM_URL"]


def test_skill_hill_climb_spec_is_accepted_and_the_runs_list_finds_it(guarded: Service) -> None:
    # The ready hill-climb, as a dry run: the live API validates it and plans its search.
    start = the('"kind":"hillclimb"').replace('"seed":1}', '"seed":1,"dry_run":true}')
    assert '"dry_run":true' in start
    submitted = fresh_shell(start, guarded.url)
    assert submitted.returncode == 0, submitted.stderr + submitted.stdout
    run_id = submitted.stdout.split()[0]
    assert guarded.wait_status(run_id, "completed", "failed")["status"] == "completed", guarded.run(
        run_id
    )
    listed = fresh_shell(
        the("trm runs --kind train").replace("--kind train", "--kind hillclimb"), guarded.url
    )
    assert listed.returncode == 0 and run_id in listed.stdout, listed
