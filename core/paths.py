"""Where files may come from and go to (SPEC §3.3, §10).

The API takes data paths only under DATA_DIR (relative paths resolve against it) and base models
only under MODEL_CACHE; the CLI resolves relative paths against the spec file. Artifact paths
never leave the run directory. Every check resolves symlinks first, and a refusal reads the same
whether the outside path exists or not, so it tells nothing about what is outside.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.errors import ApiError

# A run id is a ULID (core/models.new_id): 26 Crockford base-32 characters.
RUN_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


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


def is_run_id(value: object) -> bool:
    return isinstance(value, str) and RUN_ID.match(value) is not None


def confined(value: str, root: Path) -> Path | None:
    """`value` (relative to `root`, or absolute) with symlinks resolved, or None when that leaves
    `root`. Nothing here depends on whether the path exists."""
    if not isinstance(value, str) or not value or "\x00" in value:
        return None
    path = Path(value)
    if not path.is_absolute():
        path = root / path
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    return resolved if resolved.is_relative_to(root.resolve()) else None


def files_inside(root: Path, files: list[Path]) -> tuple[list[Path], list[str]]:
    """(files that resolve inside the folder `root`, names of those that do not). A folder source
    reads only its own files: a symlink in it that leads elsewhere (out of DATA_DIR, or to other
    data) is skipped and named by its place inside the folder, never read, its target never told."""
    top = root.resolve()
    kept, outside = [], []
    for path in files:
        try:
            inside = path.resolve(strict=True).is_relative_to(top)
        except (OSError, RuntimeError):  # dangling, or a loop
            inside = False
        if inside:
            kept.append(path)
        else:
            outside.append(path.relative_to(root).as_posix())
    return kept, outside


def outside_message(value: str, root_name: str) -> str:
    """The one refusal for a path outside its root: the same for existing and missing paths."""
    return f"{value!r} is outside {root_name}; only paths under it are read"


def data_dir_hint(data_dir: Path) -> str:
    """What a refusal for a path outside DATA_DIR adds: where it is, and how data gets there."""
    return (
        f"; TRM_DATA_DIR is {data_dir} on the API host: put data there with `trm data push DIR "
        '--name NAME` (PUT /datasets/NAME) and name it in a source as {"dataset": "NAME"}'
    )


def confine(value: str, field: str, root: Path, root_name: str = "TRM_DATA_DIR") -> Path:
    """API side: the resolved path of `value` under `root`, else a 422 naming `field`."""
    path = confined(value, root)
    if path is None:
        hint = data_dir_hint(root) if root_name == "TRM_DATA_DIR" else ""
        raise _refuse(field, outside_message(value, root_name) + hint)
    return path


def resolve_data_path(value: str, field: str, data_dir: Path) -> str:
    """API side: relative to DATA_DIR, and never outside it (symlinks included)."""
    return str(confine(value, field, data_dir))


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
            if not isinstance(source, dict) or source.get("dataset") is not None:
                continue  # a data set's path is inside it: resolve_datasets fills it in
            if isinstance(source.get("path"), str):
                found.append((f"corpus.sources[{i}].path", source, "path"))  # type: ignore[arg-type]
    if isinstance(spec.get("results_jsonl"), str):
        found.append(("results_jsonl", spec, "results_jsonl"))  # type: ignore[arg-type]
    base = spec.get("base")
    if isinstance(base, dict):
        for name, container, key in spec_path_fields(base):
            found.append((f"base.{name}", container, key))
    return found


def base_model_fields(spec: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """(field name, value) of every `qlora.base_model` a spec names (a search's base too)."""
    found = []
    qlora = spec.get("qlora")
    if isinstance(qlora, dict) and isinstance(qlora.get("base_model"), str):
        found.append((f"{prefix}qlora.base_model", qlora["base_model"]))
    if isinstance(spec.get("base"), dict):
        found.extend(base_model_fields(spec["base"], f"{prefix}base."))
    return found


# A bench side: `none`, a run id with an optional pick, or a path (which never holds a colon).
BENCH_REF = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}(?::(?:root|final))?$")


def check_bench_ref(value: Any, field: str) -> None:
    if not isinstance(value, str) or value == "none" or BENCH_REF.match(value):
        return
    if ":" in value:
        raise _refuse(
            field,
            f"{value!r} is not a run reference: a run id (26 characters, 0-9 and A-Z without "
            "I, L, O, U), optionally followed by :root or :final",
        )


def installed_data() -> set[str]:
    """The data folders of installed packages a corpus source reads when no path is given (the
    bfcl-eval package's, core/schemas/sources.py `BfclSource`): read outside DATA_DIR, as the
    source itself fills them in."""
    from core.schemas.sources import bfcl_data_folder

    folder = bfcl_data_folder()
    return {folder} if folder else set()


def corpus_sources(spec: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(field name, source) of every corpus source a spec names (a search's base too)."""
    found = []
    corpus = spec.get("corpus")
    if isinstance(corpus, dict) and isinstance(corpus.get("sources"), list):
        for i, source in enumerate(corpus["sources"]):
            if isinstance(source, dict):
                found.append((f"{prefix}corpus.sources[{i}]", source))
    if isinstance(spec.get("base"), dict):
        found.extend(corpus_sources(spec["base"], f"{prefix}base."))
    return found


def resolve_api_paths(
    spec: dict[str, Any], data_dir: Path, model_cache: Path | None = None
) -> None:
    """Rewrite a submitted spec's data paths to resolved paths under DATA_DIR; check that base
    models stay under MODEL_CACHE (names are kept: the worker looks them up there) and that bench
    sides are well-formed references. Any refusal is a 422 naming the field. A source naming a
    data set has its path filled in before (core/datasets.py `resolve_datasets`)."""
    installed = installed_data()
    for field, container, key in spec_path_fields(spec):
        if container[key] in installed:  # a package's own data folder: read-only, not a user's
            continue
        container[key] = resolve_data_path(container[key], field, data_dir)
    if model_cache is not None:
        for field, value in base_model_fields(spec):
            confine(value, field, model_cache, "TRM_MODEL_CACHE")
    if spec.get("kind") == "bench":
        for side in ("baseline", "router"):
            check_bench_ref(spec.get(side), side)


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
