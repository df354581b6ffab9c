"""specs/schemas/*.schema.json are the spec models' JSON Schemas as `trm schemas` writes them:
a spec field added in code and not in the published schema files fails here, naming the file."""

from __future__ import annotations

from app.cli.schemas import schema_files
from tests.conftest import ROOT

SCHEMAS = ROOT / "specs" / "schemas"


def test_the_published_spec_schemas_are_what_the_code_writes() -> None:
    written = schema_files()
    assert sorted(written) == sorted(p.name for p in SCHEMAS.glob("*.schema.json"))
    stale = [name for name, text in written.items() if (SCHEMAS / name).read_text() != text]
    assert not stale, f"stale: {stale}; run `.venv/bin/trm schemas --out specs/schemas`"
