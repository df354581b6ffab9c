"""What every translation of the skill's files shares: its result shape and how a path it names
is found (relative to the file's folder; the skill's Windows defaults named as such).

`root` is the API's confinement (DATA_DIR): a path that resolves outside it, symlinks followed,
is refused with one message whether it exists or not, and is never read. The CLI (`trm
import-spec`, the user's own files) passes no root."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.paths import data_dir_hint, outside_message

# (our spec as a dict, warnings, errors): an error names the key path it is about.
Translation = tuple[dict[str, Any], list[str], list[str]]

# The skill's defaults are Windows paths (`C:/projects/...`, `/mnt/c/...`, `\\server\...`).
WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|/mnt/[a-z]/|\\\\)")


def outside(raw: str, base_dir: Path, root: Path | None) -> bool:
    """Whether `raw` (relative to `base_dir`) leaves `root` once symlinks are resolved."""
    if root is None:
        return False
    path = Path(raw)
    if not path.is_absolute():
        path = base_dir / path
    try:
        return not path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return True


def existing_path(
    raw: Any, base_dir: Path, where: str, root: Path | None = None
) -> tuple[Path | None, str | None]:
    """(the path, None) when `raw` names something that exists (under `root`, when given), else
    (None, the error)."""
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        return None, f"{where}: not a path ({raw!r})"
    path = Path(raw)
    if not path.is_absolute() and (root is not None or not WINDOWS_PATH.match(raw)):
        path = base_dir / path
    if outside(raw, base_dir, root):
        hint = data_dir_hint(root) if root is not None else ""
        return None, f"{where}: {outside_message(raw, 'TRM_DATA_DIR')}{hint}"
    try:
        found = path.exists()
    except OSError as exc:  # a name over 255 bytes, a path over 4096: never a 500
        return None, f"{where}: {raw} cannot be looked up ({exc.strerror})"
    if not found:
        hint = (
            " (a Windows default of the original skill: point it at your copy)"
            if WINDOWS_PATH.match(raw)
            else ""
        )
        return None, f"{where}: {raw} does not exist{hint}"
    return path, None
