"""The guides' commands, run as a reader runs them, in the nav's order (a guide may use what an
earlier one made: the ticket log, the `tickets` controller), from one fresh clone's folder against
one `trm up`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT
from tests.docs.pages import Block, Clone, blocks

GUIDES = ROOT / "docs" / "guides"
ORDER = ("own-logs", "train-router", "hillclimb", "hermes", "hosts", "gpu")
UP = Block("guides", 0, ".venv/bin/trm up", "background", until="export TRM_URL=")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    scratch = Clone(tmp_path_factory.mktemp("guides") / "clone")
    yield scratch
    scratch.stop()


def test_the_guides_are_the_ones_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert sorted(p.stem for p in GUIDES.glob("*.md")) == sorted(ORDER)
    for name in ORDER:
        assert f"guides/{name}.md" in nav, name


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_guides_commands_run_in_order(clone: Clone) -> None:
    page_blocks = [UP]
    for name in ORDER:
        page_blocks += blocks(GUIDES / f"{name}.md")
    clone.run(page_blocks, "guides", timeout=560)
    var = clone.root / "var"
    assert (var / "tickets-corpus" / "manifest.json").exists()
    cards = [json.loads(p.read_text()) for p in (var / "runs").glob("*/scorecard.json")]
    trained = [c for c in cards if c.get("trainer") == "trm"]
    assert trained, "the train-router guide left no scored train run"
    assert (
        trained[0]["anchor_score"] > trained[0]["references"]["majority"]["anchor_score"]["value"]
    )
