"""Runs the shell commands of a docs page as a reader would: every fenced `sh` block in order, in
one bash per page, from a scratch folder that looks like a fresh clone, against a real `trm up`.

Markers on the line right above a block (docs/contributing-docs.md):
- `<!-- docs-test: not-run (REASON) -->`: shown, not run;
- `<!-- docs-test: background until "TEXT" -->`: started in the background; the page goes on once
  TEXT appears in its output; stopped when the page ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.stack import ROOT, free_port

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
NOT_RUN = re.compile(r"^not-run\s*\((.+)\)$")
BACKGROUND = re.compile(r'^background until "(.+)"$')
# What a fresh clone holds that the pages' commands read; `var/` starts empty.
CLONE_LINKS = (".venv", "specs", "docs", "scripts", "skills")
MARK = "TRM_DOCS_TEST"  # set in every process a page starts, so teardown finds them all


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    code: str
    mode: str  # "run", "background" or "not-run"
    until: str = ""
    reason: str = ""


def blocks(page: Path) -> list[Block]:
    """The `sh` blocks of a page with their markers; a marker it cannot read is an error."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) == "sh":
            marker = MARKER.match(lines[i - 1]) if i else None
            mode, until, reason = "run", "", ""
            if marker:
                text = marker.group(1)
                if m := NOT_RUN.match(text):
                    mode, reason = "not-run", m.group(1).strip()
                elif m := BACKGROUND.match(text):
                    mode, until = "background", m.group(1)
                else:
                    raise ValueError(f"{page.name}:{i}: unreadable docs-test marker {text!r}")
            code = "\n".join(lines[i + 1 : end])
            found.append(Block(page.name, i + 1, code, mode, until, reason))
        i = end + 1
    return found


def script(page_blocks: list[Block], logs: Path) -> str:
    """One bash script running a page's blocks; each announces itself on stderr first."""
    out = [
        "set -eu",  # no pipefail: `cmd | head` is a reader's habit
        "BG=()",
        # A background block runs in a process group of its own: stopping the group stops what
        # it started (trm up stops its API, worker and Redis on SIGTERM).
        'stop_bg() { for p in "${BG[@]:-}"; do [ -n "$p" ] && kill -TERM -- "-$p" 2>/dev/null;'
        " done; wait 2>/dev/null || true; }",
        "trap stop_bg EXIT",
    ]
    for n, block in enumerate(page_blocks):
        if block.mode == "not-run":
            continue
        where = f"{block.page}:{block.line}"
        out.append(f"echo '--- docs-test: {where}' >&2")
        if block.mode == "run":
            out.append(block.code)
            continue
        log = logs / f"background-{n}.log"
        out += [
            f"setsid bash -c {shlex.quote(block.code)} > {log} 2>&1 &",
            "BG+=($!)",
            "for _ in $(seq 1 1200); do",
            f"  grep -qF -- {shlex.quote(block.until)} {log} && break",
            f"  kill -0 $! 2>/dev/null || {{ cat {log} >&2; echo '{where} exited' >&2; exit 1; }}",
            "  sleep 0.1",
            "done",
            f"grep -qF -- {shlex.quote(block.until)} {log} || "
            f"{{ cat {log} >&2; echo '{where}: no {block.until!r} in 120 s' >&2; exit 1; }}",
        ]
    return "\n".join(out) + "\n"


class Clone:
    """A scratch folder that looks like a fresh clone, and the environment a reader's shell has
    there: no TRM_ settings but a free API port (and TRM_URL pointing at it), so nothing of
    another service on this host is taken or touched."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for name in CLONE_LINKS:
            (root / name).symlink_to(ROOT / name)
        port, decide_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.mark = uuid.uuid4().hex
        base = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
        self.env = {
            **base,
            "TRM_API_PORT": str(port),
            # trm up takes 8001 for its decision process when free: two starting at once (tests
            # in parallel) could both see it free.
            "TRM_DECIDE_PORT": str(decide_port),
            "TRM_URL": self.url,
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            MARK: self.mark,
        }

    def run(self, page_blocks: list[Block], name: str, timeout: float) -> None:
        """Runs the blocks; AssertionError naming the failing block and its output if one fails."""
        logs = self.root / "docs-test-logs"
        logs.mkdir(exist_ok=True)
        path = logs / f"{name}.sh"
        path.write_text(script(page_blocks, logs))
        proc = subprocess.Popen(
            ["bash", str(path)],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            raise AssertionError(f"{name}: over {timeout:.0f} s\n{output[-6000:]}") from None
        if proc.returncode != 0:
            failed = re.findall(r"--- docs-test: (\S+)", output)
            where = failed[-1] if failed else name
            raise AssertionError(
                f"the block at {where} exited {proc.returncode}:\n{output[-6000:]}"
            )

    def processes(self) -> Iterator[psutil.Process]:
        """Every live process started with this clone's mark (ours only: others' environments
        cannot be read)."""
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(MARK) == self.mark:
                    yield proc

    def stop(self) -> None:
        """SIGTERM everything the pages started (trm up stops its children), then SIGKILL."""
        left = list(self.processes())
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(left, timeout=20)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
