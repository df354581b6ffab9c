"""Causal LMs in 4-bit (SPEC §6, §7): the device and dtype they compute in, the base model in NF4,
LoRA on top of it, and adapters saved and loaded. The `qlora` trainer and the LM scoring of
evaluation both stand on this file; where a base model comes from is `base_model.py`.

transformers, peft and bitsandbytes are imported on use: loading them costs seconds, and a
process that never touches an LM (the worker, a `trm` run) never pays for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from core.rundir import ADAPTER_CONFIG, ADAPTER_WEIGHTS, atomic_file
from worker.models.base_model import resolve_base_model


def device_and_dtype() -> tuple[torch.device, torch.dtype]:
    """CUDA computes in bf16 (fp16 where bf16 is missing); a CPU in bf16 where it has bf16 dot
    products in hardware (AVX512-BF16: 1.8x the tokens/s of float32 on this machine's CPU), else
    in float32 (bf16 in software is slower than float32)."""
    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        return torch.device("cuda"), torch.bfloat16 if bf16 else torch.float16
    bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    return torch.device("cpu"), torch.bfloat16 if bf16 else torch.float32


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
    base_dir: Path, cfg: dict[str, Any], device: torch.device, dtype: torch.dtype
) -> Any:
    """4-bit base, frozen, with fresh LoRA adapters on `target_modules` (trainable, float32);
    `cfg` holds the LoRA's `r`, `alpha`, `dropout`, `target_modules`."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model = prepare_model_for_kbit_training(
        load_4bit(base_dir, device, dtype),
        use_gradient_checkpointing=True,
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


def save_adapter(folder: Path, model: Any, tokenizer: Any, base_model: str) -> None:
    """The LoRA weights into `folder`, its config naming the base model as the spec did (so
    `load_adapter` resolves it through MODEL_CACHE wherever that is), and the tokenizer."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config_path = folder / ADAPTER_CONFIG
    adapter_config = json.loads(config_path.read_text())
    adapter_config["base_model_name_or_path"] = base_model
    with atomic_file(config_path) as fh:
        fh.write(json.dumps(adapter_config, indent=2) + "\n")


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
