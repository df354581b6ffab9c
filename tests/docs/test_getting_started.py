"""The getting-started page, run as a reader runs it: from a fresh clone's folder, `trm up`, a
self-test, the routerBench bench that trains its own router, and the commands that read the
scorecard and name the run's dashboard page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs.pages import Clone, blocks

PAGE = ROOT / "docs" / "getting-started.md"


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[Clone]:
    scratch = Clone(tmp_path / "clone")
    yield scratch
    scratch.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_getting_started_reaches_a_benched_router_and_its_page(clone: Clone) -> None:
    page = blocks(PAGE)
    assert [b.mode for b in page][:2] == ["not-run", "background"], "setup, then trm up"
    clone.run(page, "getting-started", timeout=560)
    runs = sorted((clone.root / "var" / "runs").glob("*/scorecard.json"))
    benches = [json.loads(p.read_text()) for p in runs]
    bench = next(card for card in benches if card.get("bench") == "routerbench")
    # What the page promises: a trained router, far above the untrained model and majority.
    assert bench["router"]["anchor_score"] > bench["baseline_anchor_score"] + 0.3
    assert (
        bench["router"]["anchor_score"] > bench["references"]["majority"]["anchor_score"]["value"]
    )
    assert "gbdt" in bench["references"]


def test_every_not_run_block_says_why() -> None:
    pages = [PAGE, *sorted((ROOT / "docs" / "guides").glob("*.md"))]
    for page in pages:
        for block in blocks(page):
            if block.mode == "not-run":
                assert len(block.reason) > 10, f"{block.page}:{block.line} gives no reason"
