"""Reading one of the skill's files: the paths it names (must exist), the JSON files and corpus
specs it points at, and the warnings and errors met on the way."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from core.errors import ApiError
from core.settings import get_settings
from core.translate.common import existing_path, outside
from core.translate.corpus import looks_like_skill_corpus_spec, translate_corpus_spec

# A spec file named in a request is bounded like the request's own body (TRM_MAX_BODY_BYTES), never
# read whole into the API's memory (four requests naming a 297 MiB file took it to 2.5 GiB): a
# spec file of the skill is a few KiB.


def max_spec_file_bytes() -> int:
    return get_settings().max_body_bytes


class Reader:
    """Collects warnings and errors while reading one file's keys."""

    def __init__(self, base_dir: Path, root: Path | None = None) -> None:
        self.base_dir, self.root = base_dir, root
        self.warnings: list[str] = []
        self.errors: list[str] = []

    def path(self, raw: Any, where: str) -> Path | None:
        path, error = existing_path(raw, self.base_dir, where, self.root)
        if error:
            self.errors.append(error)
        return path

    def json_at(self, raw: Any, where: str) -> tuple[dict[str, Any] | None, Path]:
        """An inline object, or the JSON object in the file a path names."""
        if isinstance(raw, dict):
            return raw, self.base_dir
        path = self.path(raw, where)
        if path is None:
            return None, self.base_dir
        try:
            data = json.loads(self._read(path, raw, where))
        except (OSError, ValueError) as exc:
            self.errors.append(f"{where}: {raw} is not a JSON file ({exc})")
            return None, self.base_dir
        if not isinstance(data, dict):
            self.errors.append(f"{where}: {raw} does not hold a JSON object")
            return None, self.base_dir
        return data, path.parent

    def _read(self, path: Path, raw: Any, where: str) -> bytes:
        """The file's bytes; on the API's side (a root) at most TRM_MAX_BODY_BYTES, else a 413
        before anything is read."""
        if self.root is None:
            return path.read_bytes()
        if not path.is_file():  # a folder, or a FIFO that would hold the request forever
            raise OSError("not a regular file")
        limit = max_spec_file_bytes()
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(limit + 1) if size <= limit else b""
        if size > limit or len(data) > limit:
            message = (
                f"{where}: {raw} is {max(size, len(data))} bytes, over the {limit}"
                "-byte limit of a spec file (a spec file of the skill is a few KiB; name a data "
                "file as a source's path instead)"
            )
            raise ApiError(
                413, "payload_too_large", message, [{"field": where, "message": message}]
            )
        return data

    def corpus(self, raw: Any, where: str) -> dict[str, Any] | None:
        data, folder = self.json_at(raw, where)
        if data is None:
            return None
        if "sources" in data and not isinstance(data["sources"], list):
            self.errors.append(f"{where}.sources: expected a list of sources (objects)")
            return None
        if looks_like_skill_corpus_spec(data):
            corpus, warnings, errors = translate_corpus_spec(data, folder, root=self.root)
            self.warnings.extend(f"{where}: {w}" for w in warnings)
            self.errors.extend(f"{where}: {e}" for e in errors)
            return corpus
        for i, source in enumerate(data.get("sources") or []):
            if isinstance(source, dict) and isinstance(source.get("path"), str):
                found = self.path(source["path"], f"{where}.sources[{i}].path")
                if found is not None:
                    source["path"] = str(found.resolve())
        return data

    def names_a_path(self, value: str) -> bool:
        """Whether a bare `value` is a file to look at: it exists, or it leaves the root (then
        it is refused like any outside path, so existence outside is never told)."""
        if outside(value, self.base_dir, self.root):
            return True
        try:
            return (self.base_dir / value).exists()
        except OSError:  # too long a name: path() says so, as a 422
            return True
