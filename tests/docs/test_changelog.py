"""CHANGELOG.md reads by version: an open "Unreleased" section first, then released versions, newest
first, each dated, and the newest one is the version the package and the API report."""

from __future__ import annotations

import re
import tomllib

from app import __version__
from tests.conftest import ROOT

RELEASE = re.compile(r"^## (\d+)\.(\d+)\.(\d+) - (\d{4}-\d{2}-\d{2})$")
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def _headings() -> list[str]:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_the_changelog_opens_with_unreleased_then_dated_versions_newest_first() -> None:
    headings = _headings()
    assert headings[0] == "## Unreleased"
    released = [RELEASE.match(h) for h in headings[1:]]
    assert all(released), [h for h, m in zip(headings[1:], released, strict=True) if not m]
    keys = [(tuple(int(m.group(i)) for i in (1, 2, 3)), m.group(4)) for m in released if m]
    assert keys == sorted(keys, reverse=True), "versions and dates must both fall going down"


def test_each_version_sorts_its_changes_by_kind() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    kinds = {line[4:] for line in text.splitlines() if line.startswith("### ")}
    assert kinds <= KINDS, kinds - KINDS


def test_the_reported_version_is_the_newest_release() -> None:
    newest = RELEASE.match(_headings()[1])
    assert newest
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == __version__ == ".".join(newest.group(i) for i in (1, 2, 3))
