"""Where files may come from and go to (SPEC §3.3, §10).

The API takes data paths only under DATA_DIR (relative paths resolve against it); the CLI resolves
relative paths against the spec file. Artifact paths never leave the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import ApiError


def _refuse(field: str, message: str) -> ApiError:
    return ApiError(
        422, "validation_error", f"{field}: {message}", [{"field": field, "message": message}]
    )


def under(root: Path, candidate: Path) -> bool:
    root = root.resolve()
    try:
        candidate.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def resolve_data_path(value: str, field: str, data_dir: Path) -> str:
    """API side: relative to DATA_DIR, and never outside it (symlinks included)."""
    path = Path(value)
    if not path.is_absolute():
        path = data_dir / path
    if not under(data_dir, path):
        raise _refuse(
            field,
            f"{value!r} is outside the data directory {data_dir.resolve()}; "
            "the API reads only files under TRM_DATA_DIR",
        )
    return str(path.resolve())


def resolve_spec_file_path(value: str, spec_file: Path) -> str:
    """CLI side: relative to the folder of the spec file."""
    path = Path(value)
    if not path.is_absolute():
        path = spec_file.resolve().parent / path
    return str(path.resolve())


def spec_path_fields(spec: dict[str, Any]) -> list[tuple[str, list[Any], Any]]:
    """(field name, container, key) for every file path a spec names, so both sides rewrite them."""
    found: list[tuple[str, list[Any], Any]] = []
    corpus = spec.get("corpus")
    if isinstance(corpus, dict) and isinstance(corpus.get("sources"), list):
        for i, source in enumerate(corpus["sources"]):
            if isinstance(source, dict) and isinstance(source.get("path"), str):
                found.append((f"corpus.sources[{i}].path", source, "path"))  # type: ignore[arg-type]
    if isinstance(spec.get("results_jsonl"), str):
        found.append(("results_jsonl", spec, "results_jsonl"))  # type: ignore[arg-type]
    base = spec.get("base")
    if isinstance(base, dict):
        for name, container, key in spec_path_fields(base):
            found.append((f"base.{name}", container, key))
    return found


def resolve_api_paths(spec: dict[str, Any], data_dir: Path) -> None:
    for field, container, key in spec_path_fields(spec):
        container[key] = resolve_data_path(container[key], field, data_dir)


def safe_artifact(run_dir: Path, rel: str) -> Path:
    if rel.startswith("/") or "\x00" in rel:
        raise ApiError(
            400, "bad_path", f"artifact path {rel!r} must be relative to the run directory"
        )
    if any(part.startswith(".") and part not in (".", "..") for part in Path(rel).parts):
        # the worker's own files (.child.json, .outcome.json): not artifacts, like the listing
        raise ApiError(404, "not_found", f"no artifact {rel!r}", {"path": rel})
    target = run_dir / rel
    if not under(run_dir, target):
        raise ApiError(400, "bad_path", f"artifact path {rel!r} leaves the run directory")
    return target
