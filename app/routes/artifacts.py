"""/runs/{id}/artifacts[/{path}]: what a run left in its directory; nothing outside it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse
from sqlmodel import Session

from app.deps import AppState, session, state
from core.errors import ApiError
from core.paths import safe_artifact, under
from core.runs import get_run
from core.schemas.runs import Artifact, ArtifactList

router = APIRouter(tags=["artifacts"])
HIDDEN_PREFIX = "."


@router.get("/runs/{run_id}/artifacts", response_model=ArtifactList, summary="List a run's files")
def list_artifacts(
    run_id: str, app: Annotated[AppState, Depends(state)], db: Annotated[Session, Depends(session)]
) -> ArtifactList:
    """Every file of the run's directory with its size (manifests, `summary.json`,
    `scorecard.json`, checkpoints, the trained model); dot-files are never listed."""
    get_run(db, run_id)
    run_dir = app.settings.run_dir(run_id)
    items = []
    if run_dir.is_dir():
        for path in sorted(run_dir.rglob("*")):
            rel = path.relative_to(run_dir)
            if any(part.startswith(HIDDEN_PREFIX) for part in rel.parts):
                continue
            if path.is_file() and under(run_dir, path):
                items.append(Artifact(path=str(rel), bytes=path.stat().st_size))
    return ArtifactList(run_id=run_id, artifacts=items)


@router.get(
    "/runs/{run_id}/artifacts/{path:path}", response_class=FileResponse, summary="Read a run's file"
)
def get_artifact(
    run_id: str,
    path: str,
    app: Annotated[AppState, Depends(state)],
    db: Annotated[Session, Depends(session)],
) -> FileResponse:
    """One file of the run (`path` as listed); JSON as `application/json`, `.jsonl`, `.log` and
    `.txt` as text, others as a download. A `Range` header reads part of it. No path leaves the
    run's directory."""
    get_run(db, run_id)
    target = safe_artifact(app.settings.run_dir(run_id), path)
    try:
        found = target.is_file()
    except OSError:  # a part over 255 bytes or a path over 4096: no such artifact, not a 500
        found = False
    if not found:
        raise ApiError(404, "not_found", f"run {run_id} has no artifact {path!r}", {"path": path})
    media = "application/json" if target.suffix == ".json" else None
    if target.suffix in (".jsonl", ".log", ".txt"):
        media = "text/plain; charset=utf-8"
    return FileResponse(target, media_type=media, filename=target.name if media is None else None)
