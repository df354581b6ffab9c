"""The skill's `router-training-spec.sample.json` (its `run_trm_trainer_hermes.py --config`) →
our `train` run spec with the `qlora` trainer (SPEC §6).

The file as the skill publishes it (its `references/` folder): its data under
`source_jsonl` (a router JSONL), its hyper-parameters under `train_hparams` (with
`trainer_overrides.train` deep-merged over them; `target_modules` a comma-separated string),
`model` empty for the recipe's default. Other usual spellings of each key are accepted too, flat
or under `trainer` / `training` / `qlora` / `lora` / `hyperparameters`. What changes meaning:
- the corpus comes from the skill's corpus spec (`corpus_spec`, translated by
  `core.translate.corpus`), inline `sources`, or the router dataset (`source_jsonl`,
  `router_dataset`, `dataset_path`: a `router_jsonl` source); a prebuilt messages JSONL is not
  trained directly: our `prepare_corpus` stage rebuilds it from its sources;
- 4-bit NF4 with double quant is how `qlora` always loads: quantization switches are ignored;
- script paths, recipe labels, the Python/Hermes launchers, the recorded benchmark spec and
  output folders are ignored with a warning (the worker runs the trainer itself and writes under
  the run directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.translate.common import WINDOWS_PATH, Translation
from core.translate.reader import Reader

QLORA_KEYS = {
    "base_model": "base_model",
    "model": "base_model",
    "model_name": "base_model",
    "model_name_or_path": "base_model",
    "model_id": "base_model",
    "r": "r",
    "lora_r": "r",
    "rank": "r",
    "alpha": "alpha",
    "lora_alpha": "alpha",
    "dropout": "dropout",
    "lora_dropout": "dropout",
    "target_modules": "target_modules",
    "lora_target_modules": "target_modules",
    "lr": "lr",
    "learning_rate": "lr",
    "micro_batch": "micro_batch",
    "micro_batch_size": "micro_batch",
    "batch_size": "micro_batch",
    "per_device_train_batch_size": "micro_batch",
    "grad_accum": "grad_accum",
    "gradient_accumulation_steps": "grad_accum",
    "max_seq_len": "max_seq_len",
    "max_seq_length": "max_seq_len",
    "max_length": "max_seq_len",
    "seq_len": "max_seq_len",
    "cutoff_len": "max_seq_len",
    "epochs": "epochs",
    "num_epochs": "epochs",
    "num_train_epochs": "epochs",
    "max_steps": "max_steps",
    "eval_every": "eval_every",
    "eval_steps": "eval_every",
    "checkpoint_every": "checkpoint_every",
    "save_steps": "checkpoint_every",
    "packing": "packing",
    "seed": "seed",
}
ALWAYS_ON = {
    "load_in_4bit": "qlora always loads the base model in 4 bits",
    "quantization": "qlora always loads 4-bit NF4 with double quant",
    "bnb_4bit_quant_type": "qlora always uses NF4",
    "bnb_4bit_use_double_quant": "qlora always uses double quant",
    "bnb_4bit_compute_dtype": "the compute dtype follows the device",
    "bf16": "the compute dtype follows the device",
    "fp16": "the compute dtype follows the device",
    "gradient_checkpointing": "chosen by the trainer",
    "loss_on_assistant_only": "loss is always on assistant tokens only",
    "train_on_inputs": "loss is always on assistant tokens only",
    "streaming": "prepare_corpus reads its sources line by line",
}
IGNORED = {
    "output_dir": "a run writes under its run directory",
    "output_root": "a run writes under its run directory",
    "run_root": "a run writes under its run directory",
    "adapter_out": "the adapter is saved in the run's trainer/adapter/",
    "python": "the worker runs the trainer itself",
    "hermes": "the worker runs the trainer itself",
    "hermes_bridge": "the worker runs the trainer itself",
    "script": "the worker runs the trainer itself",
    "trainer_script": "the worker runs the trainer itself",
    "train_script": "the worker runs the trainer itself",
    "builder": "our prepare_corpus stage builds the corpus",
    "corpus_builder_script": "our prepare_corpus stage builds the corpus",
    "trainer_recipe": "a label only; the trainer is qlora",
    "baseline_model": "recorded only upstream; a bench run names its baseline",
    "benchmark_spec": "recorded only; import that bench spec on its own to run it",
    "max_records": "no counterpart: the corpus keeps every valid row (knobs shape it)",
    "system_prompt": "the messages carry the contract's own system prompt",
    "corpus_builder": "our prepare_corpus stage builds the corpus",
    "template_root": "paths are named in the spec",
    "report_to": "progress goes to the run's events and card",
    "logging_steps": "every step is a metric event",
    "description": "kept nowhere",
}
SECTIONS = (
    "trainer",
    "training",
    "train",
    "train_hparams",
    "qlora",
    "lora",
    "hyperparameters",
    "hparams",
    "config",
)
# `run_id` is the skill's run name (the service gives its own ids).
NAME_KEYS = ("name", "run_name", "job_name", "run_id")
CORPUS_KEYS = ("corpus_spec", "corpus")
ROUTER_DATA_KEYS = (
    "source_jsonl",
    "router_dataset",
    "router_jsonl",
    "dataset_path",
    "dataset_root",
    "router_data",
)
MESSAGES_KEYS = ("messages_jsonl", "train_file", "train_jsonl", "messages_path", "corpus_out")
CONTRACT_KEYS = ("contract", "output_contract")
MARKERS = {*QLORA_KEYS, *ALWAYS_ON} - {"seed", "epochs", "lr", "model", "max_steps", "dropout"}


def looks_like_skill_training_spec(data: Any) -> bool:
    """The skill's router training spec: trainer settings (LoRA, base model, 4-bit) without our
    `kind`, and no search keys (those are a hill-climb spec's)."""
    if not isinstance(data, dict) or "kind" in data:
        return False
    if {"train_hparams", "source_jsonl"} & set(data):  # router-training-spec.sample.json
        return True
    if {"mutations", "ladder", "max_generalization_gap", "search"} & set(data):
        return False
    keys = set(data)
    for section in SECTIONS:
        if isinstance(data.get(section), dict):
            keys |= set(data[section])
    return bool(keys & MARKERS) or bool(keys & set(ROUTER_DATA_KEYS)) and "trainer" in data


def translate_training_spec(
    data: dict[str, Any], base_dir: Path, root: Path | None = None
) -> Translation:
    """(our `train` spec with trainer `qlora`, warnings, errors)."""
    reader = Reader(base_dir, root)
    out: dict[str, Any] = {"kind": "train", "trainer": "qlora"}
    qlora: dict[str, Any] = {}
    corpus: dict[str, Any] | None = None
    router_sources: list[dict[str, Any]] = []
    flat: list[tuple[str, Any, str]] = []
    named_data = False
    for key, value in _merge_overrides(data, reader).items():
        if key in SECTIONS and isinstance(value, dict):
            flat.extend((k, v, f"{key}.{k}") for k, v in value.items())
        elif key == "trainer" and isinstance(value, str):
            flat.append((key, value, key))
        else:
            flat.append((key, value, key))
    for key, value, where in flat:
        if key in NAME_KEYS and isinstance(value, str):
            out["name"] = value
        elif key == "trainer" and isinstance(value, str):
            if value.lower() not in ("qlora", "qlora_sft", "train_qlora_sft", "sft", "lora"):
                reader.warnings.append(f"{where}: {value!r} read as our qlora trainer")
        elif key in QLORA_KEYS:
            _qlora_value(QLORA_KEYS[key], value, where, qlora, reader)
            if key == "seed":
                out["seed"] = value
        elif key in CORPUS_KEYS:
            named_data = True
            corpus = reader.corpus(value, where)
        elif key == "sources":
            corpus = reader.corpus({"sources": value, "dedupe": True}, "sources")
        elif key in ROUTER_DATA_KEYS:
            named_data = True
            path = reader.path(value, where)
            if path is not None:
                router_sources.append(
                    {"type": "router_jsonl", "name": "router", "path": str(path.resolve())}
                )
                reader.warnings.append(f"{where}: now a router_jsonl corpus source")
        elif key in MESSAGES_KEYS:
            reader.warnings.append(
                f"{where}: ignored ({value!r}): prepare_corpus rebuilds messages.jsonl from the "
                "corpus sources, so name those (corpus_spec or source_jsonl)"
            )
        elif key in CONTRACT_KEYS:
            if value in ("action_only", "json"):
                out["_contract"] = value
            else:
                reader.errors.append(f"{where}: {value!r} is not action_only or json")
        elif key in ("dry_run", "probe"):
            out[key] = bool(value)
        elif key in ALWAYS_ON:
            reader.warnings.append(f"{where}: ignored ({ALWAYS_ON[key]})")
        elif key in IGNORED:
            reader.warnings.append(f"{where}: ignored ({IGNORED[key]})")
        else:
            reader.warnings.append(f"{where}: ignored (no counterpart in our train spec)")
    if router_sources:
        if corpus is None:
            corpus = {"sources": router_sources}
        else:
            corpus.setdefault("sources", []).extend(router_sources)
    contract = out.pop("_contract", None)
    if corpus is None:
        if not named_data:  # a named one that is missing has its own error
            reader.errors.append(
                "no corpus: name the skill's corpus spec (corpus_spec) or the router dataset "
                "(source_jsonl)"
            )
    else:
        if contract:
            corpus["contract"] = contract
        elif "contract" not in corpus:
            corpus["contract"] = "json"
            reader.warnings.append(
                "corpus.contract: json (the router's JSON object, as the skill's router recipe)"
            )
        out["corpus"] = corpus
    if qlora:
        out["qlora"] = qlora
    return out, reader.warnings, reader.errors


def _merge_overrides(data: dict[str, Any], reader: Reader) -> dict[str, Any]:
    """The skill deep-merges `trainer_overrides.train` over `train_hparams`; so do we."""
    overrides = data.get("trainer_overrides")
    if overrides is None:
        return data
    out = {k: v for k, v in data.items() if k != "trainer_overrides"}
    if not isinstance(overrides, dict):
        reader.warnings.append("trainer_overrides: ignored (not an object)")
        return out
    for key in overrides:
        if key != "train":
            reader.warnings.append(f"trainer_overrides.{key}: ignored (only `train` is read)")
    train = overrides.get("train")
    if isinstance(train, dict):
        base = out.get("train_hparams")
        out["train_hparams"] = _deep_merge(base if isinstance(base, dict) else {}, train)
    elif train is not None:
        reader.warnings.append("trainer_overrides.train: ignored (not an object)")
    return out


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _qlora_value(field: str, value: Any, where: str, qlora: dict[str, Any], reader: Reader) -> None:
    if field == "base_model" and (value is None or value == ""):
        # The skill's empty `model` means its recipe's default; ours is the built-in base model.
        reader.warnings.append(f"{where}: empty: the built-in base model")
        return
    if field == "target_modules" and isinstance(value, str) and value.strip() != "all-linear":
        # The skill writes them as one comma-separated string.
        value = [m.strip() for m in value.split(",") if m.strip()] or value
    if field == "base_model" and isinstance(value, str):
        local = Path(value)
        if local.is_absolute() or value.startswith((".", "~")) or _looks_windows(value):
            found = reader.path(value, where)
            value = str(found.resolve()) if found is not None else value
        elif "/" in value:
            reader.warnings.append(
                f"{where}: {value!r} is a hub name; nothing is downloaded: put the model in "
                "MODEL_CACHE (or name a local folder), else the run fails with `dependency`"
            )
    qlora[field] = value


def _looks_windows(value: str) -> bool:
    return bool(WINDOWS_PATH.match(value))
