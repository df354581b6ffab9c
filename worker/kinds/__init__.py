"""What each kind of run does (SPEC §3.2): one file per kind, reading top to bottom its stages and
its dry run. A new kind is a new file here with its `KIND`, and a line below.

Light on purpose: the worker process imports it, so no kind imports torch at its top (stages that
train or score run in a child process and import it there).
"""

from __future__ import annotations

from worker.kinds import bench, hillclimb, selftest, train
from worker.kinds.base import Kind, StageDef

KINDS: dict[str, Kind] = {
    k.name: k for k in (train.KIND, bench.KIND, hillclimb.KIND, selftest.KIND)
}

__all__ = ["KINDS", "Kind", "StageDef"]
