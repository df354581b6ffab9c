"""The reference pages say what each thing does: every setting has a description and every route
a summary and a description, where the pages (scripts/docs_reference.py) read them."""

from __future__ import annotations

import importlib
import pkgutil

from fastapi.routing import APIRoute

import app.routes
from core.settings import Settings


def test_every_setting_says_what_it_does() -> None:
    bare = [name for name, field in Settings.model_fields.items() if not field.description]
    assert not bare, f"settings without a description (core/settings.py): {bare}"


def test_every_route_has_a_summary_and_a_description() -> None:
    routes = [
        route
        for info in pkgutil.iter_modules(app.routes.__path__)
        for route in importlib.import_module(f"app.routes.{info.name}").router.routes
        if isinstance(route, APIRoute) and route.include_in_schema
    ]
    bare = [f"{sorted(r.methods)} {r.path}" for r in routes if not (r.summary and r.description)]
    assert len(routes) >= 30, [r.path for r in routes]
    assert not bare, f"routes without a summary= or a docstring (app/routes): {bare}"
