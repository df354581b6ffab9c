"""The repository speaks about the software, not about how it was made: no work item numbers and
no working sessions in any tracked file (history belongs in git and CHANGELOG.md)."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT

# The words, each with one letter as a class, so that this file does not match itself.
PATTERN = r"sessio[n] [0-9]|issu[e] [0-9]|las[t] session|thi[s] session"


def test_no_tracked_file_names_a_work_item_or_a_working_session() -> None:
    found = subprocess.run(
        ["git", "grep", "-n", "-i", "-I", "-E", PATTERN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 1, f"words of the project's own process:\n{found.stdout[:4000]}"
