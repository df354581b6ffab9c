"""The one place that writes stage manifests (SPEC §3.2): `<stage>/manifest.json`, the `Stage` row,
and the `stage` event, always together. Files are written to a temp name and renamed, so a reader
never sees half a manifest."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlmodel import select

from core.db import retrying
from core.events import Publisher
from core.models import Stage, utcnow
from core.rundir import MANIFEST, manifest_path, sha256_file, write_json_atomic


def describe_paths(paths: list[Path], run_dir: Path) -> list[dict[str, Any]]:
    """Each file (directories expanded) with its sha256 and size; paths relative to the run dir."""
    out: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if not file.exists():
                out.append({"path": _rel(file, run_dir), "missing": True})
                continue
            out.append(
                {
                    "path": _rel(file, run_dir),
                    "sha256": sha256_file(file),
                    "bytes": file.stat().st_size,
                }
            )
    return out


def _rel(path: Path, run_dir: Path) -> str:
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path.resolve())


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def new_manifest(run_id: str, stage: str, attempt: int, status: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "stage": stage,
        "status": status,
        "attempt": attempt,
        "started_at": None,
        "completed_at": None,
        "inputs": [],
        "outputs": [],
        "counters": {},
        "notes": [],
        "error": None,
    }


class StageRecorder:
    def __init__(self, publisher: Publisher, run_id: str, run_dir: Path, attempt: int) -> None:
        self.publisher, self.run_id, self.run_dir, self.attempt = (
            publisher,
            run_id,
            run_dir,
            attempt,
        )

    def manifest_path(self, stage: str) -> Path:
        return manifest_path(self.run_dir, stage)

    def record(self, manifest: dict[str, Any], position: int) -> None:
        """Write the manifest file, upsert the Stage row, emit the `stage` event."""
        stage = manifest["stage"]
        write_json_atomic(self.manifest_path(stage), manifest)
        started = datetime.fromisoformat(manifest["started_at"]) if manifest["started_at"] else None
        done = manifest["completed_at"]
        completed = datetime.fromisoformat(done) if done else None
        retrying(
            lambda: self._store(manifest, position, stage, started, completed),
            self.publisher.retry_s,
            f"{stage} manifest of {self.run_id}",
        )

    def _store(
        self,
        manifest: dict[str, Any],
        position: int,
        stage: str,
        started: datetime | None,
        completed: datetime | None,
    ) -> None:
        with self.publisher.transaction() as tx:
            row = tx.session.exec(
                select(Stage).where(Stage.run_id == self.run_id, Stage.name == stage)
            ).first() or Stage(run_id=self.run_id, name=stage)
            row.position, row.status, row.attempt = (
                position,
                manifest["status"],
                manifest["attempt"],
            )
            row.started_at, row.completed_at, row.manifest = started, completed, manifest
            tx.session.add(row)
            tx.emit(
                self.run_id,
                "stage",
                {
                    "stage": stage,
                    "position": position,
                    "status": manifest["status"],
                    "attempt": manifest["attempt"],
                    "started_at": manifest["started_at"],
                    "completed_at": manifest["completed_at"],
                    "counters": manifest["counters"],
                    "error": manifest["error"],
                    "manifest_path": f"{stage}/{MANIFEST}",
                },
            )

    def start(self, stage: str, position: int) -> dict[str, Any]:
        manifest = new_manifest(self.run_id, stage, self.attempt, "running")
        manifest["started_at"] = _iso(utcnow())
        self.record(manifest, position)
        return manifest

    def finish(
        self,
        manifest: dict[str, Any],
        position: int,
        status: str,
        *,
        inputs: list[Path] = (),  # type: ignore[assignment]
        outputs: list[Path] = (),  # type: ignore[assignment]
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        manifest = dict(manifest, status=status, completed_at=_iso(utcnow()), error=error)
        manifest["inputs"] = manifest["inputs"] + describe_paths(list(inputs), self.run_dir)
        manifest["outputs"] = manifest["outputs"] + describe_paths(list(outputs), self.run_dir)
        self.record(manifest, position)
        return manifest

    def mark(self, stage: str, position: int, status: str, note: str | None = None) -> None:
        """A manifest for a stage that does not run now: `planned` (dry run) or `skipped`."""
        manifest = new_manifest(self.run_id, stage, self.attempt, status)
        if note:
            manifest["notes"].append(note)
        self.record(manifest, position)

    def load(self, stage: str) -> dict[str, Any] | None:
        path = self.manifest_path(stage)
        return json.loads(path.read_text()) if path.exists() else None
