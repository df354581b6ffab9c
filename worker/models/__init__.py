"""The models, under both the trainers (`worker/train/`) and evaluation (`worker/evaluate/`).

- `policy`: what every policy is (`(state, tools) -> action` with a score per candidate); no torch.
- `trm`: the tiny recursive model: its tokenizer, its network, its files, its policy.
- `lm`: causal LMs in 4-bit (device and dtype, the base model with LoRA on top, adapters).
- `base_model`: where a base model comes from (a folder, MODEL_CACHE, the built-in SmolLM2).

A model module never imports a trainer or evaluation: they stand on it, not it on them.
"""
