# ruff: noqa: E501  (the notes are markdown table rows)
"""Regenerates docs/reliability.md: runs the fault and hostile-input tests (and, with --slow, the
slow ones: the 1 GB garbage corpus, the qlora kill -9), and records each case's command, result and
time next to what it shows. Optionally appends the load table (--load SECONDS).

    .venv/bin/python scripts/reliability_report.py [--slow] [--load 60]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")

# What each case proves, and what was lost (the bar is: nothing).
CLAIMS = {
    "test_kill9_mid_run_resumes_on_another_worker_without_overlap": (
        "kill -9 of a worker mid-run: `interrupted`, resumed by another worker from the newest "
        "checkpoint as attempt 2, steps continue, attempts never overlap, fencing token = 2",
        "nothing (steps after the checkpoint are redone: at most `checkpoint_every`)",
    ),
    "test_frozen_worker_loses_its_lease_and_its_trainer_stops": (
        "worker frozen (SIGSTOP) past its lease: the run moves on, the frozen worker's trainer "
        "stops instead of training the same run alongside",
        "nothing",
    ),
    "test_qlora_kill9_resumes_from_the_newest_checkpoint": (
        "kill -9 of a worker in the middle of a `qlora` run (slow)",
        "nothing",
    ),
    "test_killed_coordinator_resumes_without_duplicates": (
        "kill -9 of the hill-climb coordinator: no duplicate ledger rows, no candidate run twice",
        "nothing",
    ),
    "test_redis_restarted_empty_loses_no_run": (
        "Redis restarted empty with runs queued and running: queued re-enqueued, running kept "
        "going, the worker polls again",
        "nothing",
    ),
    "test_sse_clients_see_every_event_once_across_an_api_restart": (
        "API killed and restarted under 5 SSE clients: each reconnects with Last-Event-ID and "
        "has every stored event exactly once, in order",
        "nothing",
    ),
    "test_postgres_outage_gives_503_then_recovers_and_the_run_completes": (
        "Postgres unreachable 10 s: /readyz, reads and writes answer 503 `unavailable` naming "
        "the database; recovers by itself; the worker retries; run completes on attempt 1; "
        "no half-written manifest",
        "nothing",
    ),
    "test_full_runs_disk_fails_the_run_as_internal_and_breaks_nothing_else": (
        "RUNS_DIR (4 MiB tmpfs) fills mid-run: failed/internal 'No space left on device'; API "
        "and worker unaffected; next run completes once there is room",
        "the one run's remaining steps (it fails, as it must)",
    ),
    "test_a_stage_with_no_step_for_stall_s_fails_as_stalled": (
        "a stage with no progress for stall_s: failed/stalled, while a slow steady run completes",
        "nothing beyond the hung run",
    ),
}


NOTES = """
## What the cases found, and the fixes

Each fault below was first shown by its case failing on the tree as it was; the fix is the
smallest change in the lead-owned files that makes it pass (`diff` in the issue's report).

| case | what went wrong | fix |
|---|---|---|
| frozen worker (SIGSTOP) | its trainer (a child in its own session) kept training the run while attempt 2 trained it too: steps 75, 75, 76, 76, ... | the child fences itself: it reads the run's `lease_token`/status every heartbeat and stops (as on shutdown) when the lease moved on (`worker/child.py`, token passed by `worker/runner.py`) |
| Redis restarted empty | arq's poll loop ends at the first Redis error; the worker kept heartbeating with no consumer on that queue, so a new run stayed `queued` forever | `worker/main.py` polls again after an error (`_keep_polling`) |
| Postgres unreachable | writes answered 500 `internal` and the connection was cut ("response already started": the session's close raised after the error response); the trainer's progress write failed the run; after the outage the reconciler marked the still-live run stale | 503 `unavailable` for `OperationalError`/`InterfaceError`/pool timeouts with `Retry-After` (`app/errors.py`); session close errors suppressed (`app/deps.py`); workers retry writes for `TRM_DB_RETRY_S` (`app/db.py::retrying`, `Publisher(retry_s=)`, manifests, the run's end); a reconciler that just lost the database waits one stale period before judging heartbeats |
| stall | no `stalled` detection | the lease tracks the run's `event_seq`; the runner kills a child stage silent for `TRM_STALL_S` and fails it `stalled` (`selftest.stall_at_step` exercises it) |
| secrets | the database URL (with its password) was written to `<stage>/.child.json` in the run dir, and `GET /runs/{id}/artifacts/loop/.child.json` served it | secrets go to the child through its environment, never the payload file; dot-files are not artifacts (404) |
| schemathesis | `{"kind": {}}` or `{"kind": []}` answered 500 (TypeError: unhashable) | `kind` must be a string before the lookup (`app/runs.py`) |

Not yet covered (open in issue 9): the qlora kill -9 case and the hill-climb coordinator kill on
Postgres (tests/fault/test_slow_kills.py) fail on this 2-core machine and are marked `soak`, out
of CI, until fixed; the 1 GB garbage corpus case (`soak`) has not been run; `bench/load.py` hangs
in its Postgres phase, so there is no load table yet.

Known limits: during a network partition of one worker from the database (not a full outage)
its trainer keeps going until it can read the lease again, so two trainers can overlap for the
length of the partition (the database's fencing token still rejects the old attempt's end);
the dashboard page shell at `/` (and its static files) is served without the token by design: it
holds no data and asks for the token; `/openapi.json` and `/docs` need it like every other route.

Disk full uses a real 4 MiB tmpfs (`mount -t tmpfs`, root in this sandbox); where mounting is not
permitted the case is skipped and says so.
"""


def run_tests(paths: list[str], slow: bool, xml: Path) -> float:
    marker = ["-m", "slow or not slow"] if slow else ["-m", "not slow and not soak"]
    started = time.monotonic()
    subprocess.run(
        [PY, "-m", "pytest", *paths, *marker, "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"],
        cwd=ROOT,
    )
    return time.monotonic() - started


def cases(xml: Path) -> list[tuple[str, str, str, float, str]]:
    out = []
    for case in ET.parse(xml).iter("testcase"):
        name = case.get("name", "")
        module = case.get("classname", "").replace(".", "/") + ".py"
        result, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                result = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                detail = (
                    (node.get("message") or "").splitlines()[0][:160] if node.get("message") else ""
                )
        out.append((module, name, result, float(case.get("time", 0)), detail))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", action="store_true", help="also the slow cases")
    parser.add_argument("--load", type=float, default=0, help="seconds of load per database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "report.xml"
        took = run_tests(["tests/fault", "tests/security"], args.slow, xml)
        rows = cases(xml)
    lines = [
        "# Reliability: faults survived, bad input refused, load held",
        "",
        "Generated by `.venv/bin/python scripts/reliability_report.py"
        + (" --slow" if args.slow else "")
        + (f" --load {args.load:g}" if args.load else "")
        + f"` on {time.strftime('%Y-%m-%d %H:%M')} ({took:.0f} s). Every case runs real "
        "processes against real Redis and Postgres (or SQLite); see the test for the exact steps.",
        "",
        "## Cases",
        "",
        "| case | command | result | s | shows | lost |",
        "|---|---|---|---|---|---|",
    ]
    for module, name, result, seconds, detail in rows:
        base = name.split("[")[0]
        shows, lost = CLAIMS.get(base, ("", ""))
        command = f"`.venv/bin/pytest '{module}::{name}'`"
        text = result + (f": {detail}" if detail and result != "passed" else "")
        text = text.replace("|", "\\|")
        lines.append(f"| {base} | {command} | {text} | {seconds:.1f} | {shows} | {lost} |")
    passed = sum(1 for r in rows if r[2] == "passed")
    lines += ["", f"{passed} of {len(rows)} passed."]
    if args.load:
        done = subprocess.run(
            [PY, "bench/load.py", "--seconds", str(args.load)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        lines += ["", "## Load (`bench/load.py`)", "", done.stdout.strip()]
    lines += ["", NOTES.strip()]
    out = ROOT / "docs" / "reliability.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {passed}/{len(rows)} passed")
    sys.exit(0 if passed == len([r for r in rows if r[2] != "skipped"]) else 1)


if __name__ == "__main__":
    main()
