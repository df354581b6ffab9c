"""The dashboard (SPEC §1, §10): `GET /` serves one HTML page, `/ui/*` its script and styles.

The page and its static files load without the token (the page asks for it, then sends it on
every API call); `/ui/specs`, the sample specs for the submit form, needs the token like any
other API route. No build step: the files in `app/dashboard/` are served as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse

from app.deps import require_token
from core.errors import ApiError

router = APIRouter(tags=["dashboard"])

STATIC = Path(__file__).resolve().parent.parent / "dashboard"
# The repo's sample specs; absent when the package is installed without the repo checkout.
SPECS = Path(__file__).resolve().parent.parent.parent / "specs"
FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "plots.js": "text/javascript; charset=utf-8",
    "run.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# The page is small and changes with the code: let browsers revalidate instead of caching it.
NO_CACHE = {"Cache-Control": "no-cache"}


@router.get("/", response_class=FileResponse, include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=NO_CACHE)


@router.get("/ui/specs", dependencies=[Depends(require_token)], summary="Sample specs")
def sample_specs() -> dict[str, Any]:
    """The sample run specs in `specs/*.json`, for the submit form's menu."""
    samples = []
    for path in sorted(SPECS.glob("*.json")) if SPECS.is_dir() else []:
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(spec, dict):
            samples.append({"file": path.name, "kind": spec.get("kind"), "spec": spec})
    return {"specs": samples}


@router.get("/ui/{name}", response_class=FileResponse, include_in_schema=False)
def static_file(name: str) -> FileResponse:
    if name not in FILES:
        raise ApiError(404, "not_found", f"no dashboard file {name!r}")
    return FileResponse(STATIC / name, media_type=FILES[name], headers=NO_CACHE)
