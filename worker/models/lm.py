"""Causal LMs in 4-bit (SPEC §6, §7): the device and dtype they compute in, the base model in NF4,
LoRA on top of it, and adapters saved and loaded. The `qlora` trainer and the LM scoring of
evaluation both stand on this file; where a base model comes from is `base_model.py`.

transformers, peft and bitsandbytes are imported on use: loading them costs seconds, and a
process that never touches an LM (the worker, a `trm` run) never pays for it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import MethodType
from typing import Any

import torch
import torch.nn.functional as F

from core.rundir import (
    ADAPTER_CONFIG,
    ADAPTER_TRAINED,
    ADAPTER_WEIGHTS,
    atomic_file,
    write_json_atomic,
)
from worker.models.base_model import resolve_base_model

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def device_and_dtype(compute_dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """CUDA computes in bf16 (fp16 where bf16 is missing); a CPU in bf16 where it has bf16 dot
    products in hardware (AVX512-BF16: 1.8x the tokens/s of float32 on this machine's CPU), else
    in float32 (bf16 in software is slower than float32). `compute_dtype` other than "auto"
    (the qlora config's key, the bench's `--dtype`) forces one of `DTYPES`."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if compute_dtype != "auto":
        return device, DTYPES[compute_dtype]
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        return device, torch.bfloat16 if bf16 else torch.float16
    return device, torch.bfloat16 if cpu_has_bf16() else torch.float32


def cpu_has_bf16() -> bool:
    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def load_4bit(base_dir: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """The base model with every linear layer but the output head in 4-bit NF4, double quant;
    the rest (embeddings, norms, output head) in float32, as `prepare_model_for_kbit_training`
    leaves them for training, so that a reloaded adapter computes what the trained model did."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    )
    model = AutoModelForCausalLM.from_pretrained(
        base_dir, quantization_config=quant, dtype=dtype, device_map={"": device}
    )
    for module in model.modules():
        # On CPUs with AVX512-BF16, bitsandbytes repacks the 4-bit weights for a bf16 kernel on
        # the first forward in eval mode, and keeps them so. That kernel has no backward (training
        # after an eval would silently lose the gradient through the base weights) and rounds
        # differently (a reloaded adapter would not reproduce the trained logits). Never repack.
        if hasattr(module, "support_avx512bf16_for_cpu"):
            setattr(module, "support_avx512bf16_for_cpu", False)  # noqa: B010
    for param in model.parameters():
        if param.dtype in (torch.float16, torch.bfloat16) and type(param).__name__ != "Params4bit":
            param.data = param.data.float()
    return model


def load_base(name: str, model_cache: Path) -> tuple[Any, Any, Path]:
    """(the base model `name` in 4-bit, in eval mode; its tokenizer; its folder)."""
    from transformers import AutoTokenizer

    base_dir = resolve_base_model(name, Path(model_cache))
    device, dtype = device_and_dtype()
    model = load_4bit(base_dir, device, dtype)
    return model.eval(), AutoTokenizer.from_pretrained(base_dir), base_dir


def build_lora_model(
    base_dir: Path,
    cfg: dict[str, Any],
    device: torch.device,
    dtype: torch.dtype,
    *,
    gradient_checkpointing: bool = True,
) -> Any:
    """4-bit base, frozen, with fresh LoRA adapters on `target_modules` (trainable, float32);
    `cfg` holds the LoRA's `r`, `alpha`, `dropout`, `target_modules`."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model = prepare_model_for_kbit_training(
        load_4bit(base_dir, device, dtype),
        use_gradient_checkpointing=gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    lora = LoraConfig(
        r=cfg["r"],
        lora_alpha=cfg["alpha"],
        lora_dropout=cfg["dropout"],
        target_modules=cfg["target_modules"],
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def activation_bytes_per_token(model: Any, dtype: torch.dtype) -> int:
    """The bytes one token's activations take in one decoder layer kept for backward (not
    checkpointed): 13 hidden-wide tensors (norms, LoRA inputs and dropout, attention in and
    out, residuals) and 4 intermediate-wide ones (the MLP's gate, up, activation, product), at 4
    bytes in float32 and 3 on average in bf16 (the LoRA path and the norms stay in float32).
    Measured on SmolLM2-135M with LoRA on q/k/v/o: 48.8 KB float32, this says 54.5 KB."""
    config = model.config
    width = 13 * config.hidden_size + 4 * config.intermediate_size
    return width * (4 if dtype == torch.float32 else 3)


def checkpoint_within(model: Any, budget: int, tokens: int, dtype: torch.dtype) -> int:
    """Leave decoder layers uncheckpointed (their activations kept instead of recomputed in
    backward, a third less compute for that layer: the base model is frozen, so backward is one
    matmul per forward one) while their activations for a micro-batch of `tokens` fit `budget`
    bytes; returns how many layers stay checkpointed. The model must have gradient
    checkpointing enabled (`build_lora_model`'s default)."""
    layers = list(model.get_base_model().get_decoder().layers)
    per_layer = max(1, activation_bytes_per_token(model, dtype) * tokens)
    free = min(len(layers), budget // per_layer)
    for layer in layers[:free]:
        layer.gradient_checkpointing = False
    return len(layers) - free


def dense_bytes(model: Any, dtype: torch.dtype) -> int:
    """What `dequantize_frozen` would hold: every 4-bit weight of `model` in `dtype`."""
    import bitsandbytes as bnb

    size = torch.tensor([], dtype=dtype).element_size()
    linears: list[Any] = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    return sum(int(math.prod(m.weight.quant_state.shape)) for m in linears) * size


def dequantize_frozen(model: Any, dtype: torch.dtype) -> int:
    """Dequantize every frozen 4-bit weight once, into `dtype`, and compute its layer from that
    copy from now on; returns the bytes it holds.

    On a CPU, bitsandbytes computes a 4-bit layer by dequantizing its weight into the compute
    dtype on every call (forward, and again in backward for the input's gradient): on
    SmolLM2-135M a third of a bf16 step (the bf16 matmuls are fast), a few percent of a float32
    one. The weights are frozen, so one dequantization serves the whole run. The copy holds
    exactly the values that dequantizing on each call computes, and the layer multiplies by it
    as bitsandbytes does (`F.linear` in the compute dtype, output back in the input's dtype), so
    a model with the copy computes what the 4-bit model computes and an adapter trained on it
    reloads (`load_adapter`, 4-bit) to the same logits. The 4-bit
    weight stays on the layer: save, load and the LM scoring never see the copy."""
    import bitsandbytes as bnb

    held = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            weight = _dequantize(module, dtype)
            # a plain attribute, not a buffer: the model's state (save, compare) stays the 4-bit one
            module.dense_weight = weight
            setattr(module, "forward", MethodType(_dense_forward, module))  # noqa: B010
            held += weight.numel() * weight.element_size()
    return held


def _dequantize(module: Any, dtype: torch.dtype) -> torch.Tensor:
    """The weight as bitsandbytes' own CPU matmul dequantizes it (nested absmax first)."""
    state = module.weight.quant_state
    absmax = state.absmax
    if state.nested:
        absmax = (
            torch.ops.bitsandbytes.dequantize_blockwise.default(
                absmax,
                state.state2.absmax,
                state.state2.code,
                state.state2.blocksize,
                torch.float32,
            )
            + state.offset
        )
    dequantize = torch.ops.bitsandbytes.dequantize_4bit.default
    with torch.no_grad():
        return dequantize(
            module.weight.data, absmax, state.blocksize, state.quant_type, state.shape, dtype
        ).contiguous()


def _dense_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    weight = self.dense_weight
    bias = None if self.bias is None else self.bias.to(weight.dtype)
    return F.linear(x.to(weight.dtype), weight, bias).to(x.dtype)


def load_adapter(adapter_dir: Path, model_cache: Path) -> tuple[Any, Any]:
    """A saved adapter on its 4-bit base, in eval mode, with the tokenizer saved beside it."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    adapter_dir = Path(adapter_dir)
    base_name = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    base_dir = resolve_base_model(base_name, Path(model_cache))
    device, dtype = device_and_dtype()
    model = PeftModel.from_pretrained(load_4bit(base_dir, device, dtype), adapter_dir)
    has_tokenizer = (adapter_dir / "tokenizer_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir if has_tokenizer else base_dir)
    return model.eval(), tokenizer


def save_adapter(
    folder: Path, model: Any, tokenizer: Any, base_model: str, max_seq_len: int | None = None
) -> None:
    """The LoRA weights into `folder`, its config naming the base model as the spec did (so
    `load_adapter` resolves it through MODEL_CACHE wherever that is), and the tokenizer; with
    `max_seq_len`, the length its training rows were cut to (ADAPTER_TRAINED), which scoring
    cuts a prompt to as well."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config_path = folder / ADAPTER_CONFIG
    adapter_config = json.loads(config_path.read_text())
    adapter_config["base_model_name_or_path"] = base_model
    with atomic_file(config_path) as fh:
        fh.write(json.dumps(adapter_config, indent=2) + "\n")
    if max_seq_len is not None:
        write_json_atomic(folder / ADAPTER_TRAINED, {"max_seq_len": int(max_seq_len)})


def trained_max_seq_len(adapter_dir: Path) -> int | None:
    """The length an adapter's training rows were cut to (None: not recorded, an adapter saved
    before it was, or one trained elsewhere)."""
    path = Path(adapter_dir) / ADAPTER_TRAINED
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get("max_seq_len")
    return value if isinstance(value, int) and value > 0 else None


def save_lora(model: Any, folder: Path) -> None:
    """The LoRA weights alone: a checkpoint's model part (the base model never changes)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    lora = get_peft_model_state_dict(model)
    save_file({k: v.detach().cpu().contiguous() for k, v in lora.items()}, folder / ADAPTER_WEIGHTS)


def load_lora(model: Any, folder: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(folder / ADAPTER_WEIGHTS))


def bnb_backend(device: torch.device) -> str:
    """How bitsandbytes computes a 4-bit layer in training on `device`."""
    if device.type == "cuda":
        return "bitsandbytes CUDA (dequantize per call)"
    return "bitsandbytes CPU (dequantize per call, F.linear)"
