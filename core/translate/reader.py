"""Reading one of the skill's files: the paths it names (must exist), the JSON files and corpus
specs it points at, and the warnings and errors met on the way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.translate.common import existing_path, outside
from core.translate.corpus import looks_like_skill_corpus_spec, translate_corpus_spec


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
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.errors.append(f"{where}: {raw} is not a JSON file ({exc})")
            return None, self.base_dir
        if not isinstance(data, dict):
            self.errors.append(f"{where}: {raw} does not hold a JSON object")
            return None, self.base_dir
        return data, path.parent

    def corpus(self, raw: Any, where: str) -> dict[str, Any] | None:
        data, folder = self.json_at(raw, where)
        if data is None:
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
        return outside(value, self.base_dir, self.root) or (self.base_dir / value).exists()
