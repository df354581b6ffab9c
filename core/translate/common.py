"""What every translation of the skill's files shares: its result shape and how a path it names
is found (relative to the file's folder; the skill's Windows defaults named as such)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# (our spec as a dict, warnings, errors): an error names the key path it is about.
Translation = tuple[dict[str, Any], list[str], list[str]]

# The skill's defaults are Windows paths (`C:/projects/...`, `/mnt/c/...`, `\\server\...`).
WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|/mnt/[a-z]/|\\\\)")


def existing_path(raw: Any, base_dir: Path, where: str) -> tuple[Path | None, str | None]:
    """(the path, None) when `raw` names something that exists, else (None, the error)."""
    if not isinstance(raw, str) or not raw:
        return None, f"{where}: not a path ({raw!r})"
    path = Path(raw)
    if not path.is_absolute() and not WINDOWS_PATH.match(raw):
        path = base_dir / path
    if not path.exists():
        hint = (
            " (a Windows default of the original skill: point it at your copy)"
            if WINDOWS_PATH.match(raw)
            else ""
        )
        return None, f"{where}: {raw} does not exist{hint}"
    return path, None
