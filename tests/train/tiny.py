"""The small trm config the feature and plan tests train with: one step, no recursion, a fast
learning rate, so a test's rows are learned in seconds."""

from __future__ import annotations

from typing import Any


def tiny_trm(epochs: int) -> dict[str, Any]:
    """A one-step trm of 32 hidden units that trains `epochs` epochs, never stopped early."""
    return {
        "hidden": 32,
        "n_recursions": 1,
        "cycles": 1,
        "supervision_steps": 1,
        "batch_size": 16,
        "lr": 1e-2,
        "epochs": epochs,
        "patience": epochs,
    }
