"""The docs site builds with `mkdocs build --strict`: a broken link, a missing anchor or a page
left out of the nav fails here (mkdocs.yml's `validation`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

MKDOCS = Path(sys.executable).parent / "mkdocs"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def mkdocs() -> Path:
    if not MKDOCS.exists():
        pytest.skip(f"mkdocs is not installed at {MKDOCS} (scripts/setup.sh installs .[dev])")
    return MKDOCS


def test_the_docs_site_builds_with_every_link_and_anchor_resolving(
    mkdocs: Path, tmp_path: Path
) -> None:
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "getting-started/index.html", "reference/api/index.html"):
        assert (tmp_path / "site" / page).exists(), page


def test_a_broken_link_fails_the_build(mkdocs: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "getting-started.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md#nothing).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    )
    done = _build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr
