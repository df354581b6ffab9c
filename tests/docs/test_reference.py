"""The reference pages (docs/reference/) are what scripts/docs_reference.py writes from the code:
a route, spec field, verb or setting added without regenerating them fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT


def _script() -> ModuleType:
    path = ROOT / "scripts/docs_reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_code_says() -> None:
    pages = _script().render()
    assert set(pages) == {"api.md", "specs.md", "cli.md", "settings.md"}
    stale = [
        name
        for name, text in pages.items()
        if not (ROOT / "docs/reference" / name).exists()
        or (ROOT / "docs/reference" / name).read_text() != text
    ]
    assert not stale, (
        f"docs/reference/{{{','.join(stale)}}} differ from the code; "
        "run .venv/bin/python scripts/docs_reference.py and commit the pages"
    )


def test_the_reference_names_every_route_verb_setting_and_spec_field() -> None:
    from app.cli import build_parser
    from core.schemas.specs import SPEC_MODELS
    from core.settings import Settings

    pages = _script().render()
    for verb in build_parser()._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
        assert f"## `trm {verb}`" in pages["cli.md"], verb
    for name in Settings.model_fields:
        assert f"`TRM_{name.upper()}`" in pages["settings.md"], name
    for kind, model in SPEC_MODELS.items():
        assert f"## `{kind}`" in pages["specs.md"]
        for field in model.model_fields:
            assert f"| `{field}` |" in pages["specs.md"], f"{kind}.{field}"
    routes = ("POST /runs", "GET /runs/{run_id}/events", "POST /benches/{name}", "GET /healthz")
    for route in routes:
        assert f"`{route}`" in pages["api.md"], route


def test_check_mode_names_a_stale_page(tmp_path: Path) -> None:
    script = _script()
    assert script.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "settings.md").write_text("# edited by hand\n")
    assert script.main(["--check", "--out", str(tmp_path)]) == 1
