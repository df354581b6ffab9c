"""Training checkpoints, shared by both trainers (SPEC §6): `<out>/checkpoints/step-NNNNNN/`.

A checkpoint holds what the trainer writes (its weights, through `write_model`) plus what every
trainer needs to continue exactly where it stopped: the optimizer and LR-scheduler state and the
RNG states (torch, CUDA, Python's `random`) in `trainer_state.json` + `trainer_state.safetensors`
(`state_io.py`: no pickle, so loading one runs no code), and `checkpoint.json` (the step, the
counters, the config fingerprint).

- Whole or absent: it is written into `checkpoints/.step-NNNNNN.tmp-<pid>/`, files flushed to
  disk, then renamed to `step-NNNNNN` in one `rename`. A kill -9 at any moment leaves either the
  complete folder or a dot-named temp folder that `list_checkpoints` never looks at (the next
  save removes it once its process is gone). `checkpoint.json` is written last, and a folder
  without it is not a checkpoint, which also covers folders copied by hand.
- Old checkpoints are renamed away before they are deleted, so a kill in the middle of a delete
  never leaves a half-deleted folder under a checkpoint's name.
- Only `step-<digits>` folders count, ordered by their number (not by name or mtime).
- A checkpoint carries the fingerprint of the config and the training data that made it; a
  resume from one of another config, corpus or seed is refused (`bad_input`) instead of silently
  mixing two runs.
- A trainer resumes only from a checkpoint it can trust: under the service, one whose `digest`
  an earlier attempt of the same run recorded in the run's own events when it saved it
  (`StageCallbacks`); anything else in the folder (planted through an upload, copied by hand) is
  passed over. Keys the OOM retry changes (the micro-batch and the accumulation, same
  effective batch) are left out of the fingerprint by the trainer.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from core.rundir import CHECKPOINT_META, CHECKPOINTS, write_json_atomic
from worker.context import StageFailure
from worker.train.state_io import load_state, save_state

KEEP = 2  # the newest and the one before it
_NAME = re.compile(r"step-(\d+)")


def folder(out_dir: Path, step: int) -> Path:
    return Path(out_dir) / CHECKPOINTS / f"step-{step:06d}"


def list_checkpoints(out_dir: Path) -> list[Path]:
    """The complete checkpoints under `out_dir`, oldest first."""
    root = Path(out_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [
        (int(match.group(1)), path)
        for path in root.iterdir()
        if (match := _NAME.fullmatch(path.name)) and (path / CHECKPOINT_META).is_file()
    ]
    return [path for _, path in sorted(found)]


def newest(out_dir: Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def fingerprint(config: dict[str, Any], ignore: tuple[str, ...], data: list[Path]) -> str:
    """A digest of `config` (less the `ignore` keys) and the bytes of the `data` files."""
    kept = {k: v for k, v in config.items() if k not in ignore}
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode())
    for path in data:
        if path.exists():
            with path.open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def resume_point(
    out_dir: Path, expected: str, trusted: Callable[[Path], bool] | None = None
) -> Path | None:
    """The newest checkpoint that `trusted` vouches for, or None; `bad_input` when it was made
    with another fingerprint."""
    found = [p for p in list_checkpoints(out_dir) if trusted is None or trusted(p)]
    path = found[-1] if found else None
    if path is None:
        return None
    made_with = json.loads((path / CHECKPOINT_META).read_text()).get("fingerprint")
    if made_with != expected:
        raise StageFailure(
            "bad_input",
            f"{path} was saved by a run with another config, corpus or seed; delete "
            f"{path.parent} to start over, or restore the config",
        )
    return path


def save(
    out_dir: Path,
    step: int,
    write_model: Callable[[Path], object],
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    meta: dict[str, Any],
    keep: int = KEEP,
) -> Path:
    """Write checkpoint `step` atomically (`meta` should hold the `fingerprint`), then drop all
    but the newest `keep`; returns its folder."""

    def write(tmp: Path) -> None:
        write_model(tmp)
        state = {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(),
        }
        save_state(tmp, state)
        # Not fsynced here: `write_folder` syncs every file of the folder before the rename.
        write_json_atomic(tmp / CHECKPOINT_META, {**meta, "step": step}, durable=False)

    final = write_folder(folder(out_dir, step), write)
    for old in list_checkpoints(out_dir)[:-keep]:
        _remove(old)
    return final


def write_folder(final: Path, write: Callable[[Path], None]) -> Path:
    """`write` fills a fresh temp folder beside `final`, which is then renamed to `final` (an
    existing one replaced): readers see the old folder or the new one, never a mix."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _clear_leftovers(final.parent, final.name)
    tmp.mkdir(parents=True)
    write(tmp)
    _sync_folder(tmp)
    # A folder of that name already (the same step saved again: a stop right after a scheduled
    # save) is renamed aside first: a directory cannot be renamed over a non-empty one.
    old = _set_aside(final) if final.exists() else None
    os.replace(tmp, final)
    _sync_folder(final.parent, files=False)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load(
    path: Path, optimizer: torch.optim.Optimizer, scheduler: Any | None = None
) -> dict[str, Any]:
    """Restore the optimizer, the scheduler and the RNG states from `path`; returns its
    `checkpoint.json` (the trainer loads its own weights). Tensors are read onto the CPU;
    `load_state_dict` moves the optimizer's state to its parameters' device."""
    state = load_state(path)
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    restore_rng(state["rng"])
    return dict(json.loads((path / CHECKPOINT_META).read_text()))


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _clear_leftovers(root: Path, name: str) -> None:
    """Temp folders of `step-*` (or of `name`) left by processes that are gone (killed mid-save
    or mid-delete); a live one may be another attempt still saving (a fenced trainer finishing its
    step), so it is left alone."""
    if not root.is_dir():
        return
    for path in [*root.glob(".step-*"), *root.glob(f".{name}.*")]:
        pid = path.name.rpartition("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid() or not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    """Rename out of the checkpoint namespace first: a kill mid-delete leaves only a temp name."""
    shutil.rmtree(_set_aside(path), ignore_errors=True)


def _set_aside(path: Path) -> Path:
    trash = path.with_name(f".{path.name}.old-{os.getpid()}")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    return trash


def _sync_folder(path: Path, files: bool = True) -> None:
    """fsync the files in `path`, then `path` itself: after a rename, the checkpoint survives a
    machine crash too, not only a killed process."""
    if files:
        for file in path.rglob("*"):
            if file.is_file():
                with file.open("rb") as handle:
                    os.fsync(handle.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
