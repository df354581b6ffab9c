"""A trainer's resumable state (optimizer, LR scheduler, RNG) on disk without pickle: every tensor
in `trainer_state.safetensors`, everything else as JSON in `trainer_state.json`, with a marker
where each tensor was. Loading one runs no code, whoever wrote the files (SPEC §2: no pickle loads
of files in a run directory).

The state is nested dicts, lists and tuples of tensors, numbers, strings, booleans and None (what
`optimizer.state_dict()`, an LR scheduler's `state_dict()`, `torch.get_rng_state()` and
`random.getstate()` hold); tuples come back as tuples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from core.rundir import CHECKPOINT_STATE, CHECKPOINT_TENSORS

TENSOR, TUPLE, KEYS = "__tensor__", "__tuple__", "__int_keys__"


def _pack(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = value.detach().cpu().contiguous()
        return {TENSOR: key}
    if isinstance(value, dict):
        if value and all(isinstance(k, int) for k in value):  # optimizer state: {param index: ...}
            return {KEYS: [[k, _pack(v, tensors)] for k, v in value.items()]}
        return {str(k): _pack(v, tensors) for k, v in value.items()}
    if isinstance(value, tuple):
        return {TUPLE: [_pack(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_pack(v, tensors) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item"):  # a numpy or torch scalar
        return value.item()
    raise TypeError(f"cannot store a {type(value).__name__} in a trainer state")


def _unpack(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, dict):
        if TENSOR in value:
            return tensors[value[TENSOR]]
        if TUPLE in value:
            return tuple(_unpack(v, tensors) for v in value[TUPLE])
        if KEYS in value:
            return {int(k): _unpack(v, tensors) for k, v in value[KEYS]}
        return {k: _unpack(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_unpack(v, tensors) for v in value]
    return value


def save_state(folder: Path, state: dict[str, Any]) -> None:
    """Into `folder` (a checkpoint's temp folder: `checkpoints.write_folder` syncs and renames)."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _pack(state, tensors)
    save_file(tensors, str(folder / CHECKPOINT_TENSORS))
    (folder / CHECKPOINT_STATE).write_text(json.dumps(skeleton))


def load_state(folder: Path) -> dict[str, Any]:
    tensors = load_file(str(folder / CHECKPOINT_TENSORS))
    state = _unpack(json.loads((folder / CHECKPOINT_STATE).read_text()), tensors)
    if not isinstance(state, dict):
        raise ValueError(f"{folder / CHECKPOINT_STATE}: not a trainer state")
    return state
