"""A process that decides with its heap kept (`worker/decide/heap.py`, as the decision process
sets it) decides as before and stops faulting in fresh pages call after call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.decide.conftest import TinyRun

ROOT = Path(__file__).resolve().parents[2]

# Decides 64-row calls over and over in a fresh process: the page faults of the last calls and
# every call's actions, as JSON.
SCRIPT = """
import json, resource, sys
from worker.decide.controller import DecideRow, load_controller
from worker.decide.heap import keep_heap

kept = sys.argv[3] == "kept" and keep_heap()
lines = open(sys.argv[2]).read().splitlines()
spare = [f"spare.{k}" for k in range(120)]  # candidates enough for arrays of a few MB a call
rows = [DecideRow(r["state"], r["tools"] + spare) for r in map(json.loads, lines)]
rows = [rows[i % len(rows)] for i in range(64)]
controller = load_controller(sys.argv[1], "trm")
actions = []
for call in range(6):
    if call == 2:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    actions.append([d.action for d in controller.decide(rows)])
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start
print(json.dumps({"kept": kept, "faults": faults, "actions": actions}))
"""


def decide_in_a_process(run: TinyRun, heap: str) -> dict:
    anchors = run.corpus / "anchor.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(run.trainer_dir), str(anchors), heap],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_a_kept_heap_decides_alike_without_fresh_pages_each_call(trm_run: TinyRun) -> None:
    kept = decide_in_a_process(trm_run, "kept")
    if not kept["kept"]:
        pytest.skip("not glibc's malloc: nothing to keep")
    plain = decide_in_a_process(trm_run, "default")

    assert kept["actions"] == plain["actions"]
    assert all(actions == kept["actions"][0] for actions in kept["actions"])
    # 4 calls of 64 rows of 120-odd candidates after 2 to warm up: the arrays reuse the heap's
    # memory (with glibc's defaults they faulted in about 1,000 pages a call; what is left is
    # Python's own arenas).
    assert kept["faults"] <= 400
