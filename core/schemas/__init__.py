"""Request and response models. Spec models forbid unknown keys (SPEC §3.3)."""
