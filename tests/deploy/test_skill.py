"""The Hermes skill folder: front matter Hermes reads, and links that resolve."""

from __future__ import annotations

import re

import yaml

from tests.deploy.conftest import ROOT

SKILL = ROOT / "skills" / "trm-trainer"


def test_skill_front_matter_has_what_hermes_reads() -> None:
    text = (SKILL / "SKILL.md").read_text()
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert match, "SKILL.md starts with YAML front matter"
    meta = yaml.safe_load(match.group(1))
    assert meta["name"] == "trm-trainer"
    assert meta["description"] and re.fullmatch(r"\d+\.\d+\.\d+", meta["version"])
    assert "routerbench" in meta["metadata"]["hermes"]["tags"]


def test_skill_links_resolve_and_the_rules_are_stated() -> None:
    text = (SKILL / "SKILL.md").read_text()
    for link in re.findall(r"\]\((references/[^)]+)\)", text):
        assert (SKILL / link).is_file(), link
    assert '"bench":"routerbench"' in text  # tests/hermes runs it
    assert "--idempotency-key" in text and "trm watch" in text
    assert "every stage" in text and "trm show RUN_ID" in text
