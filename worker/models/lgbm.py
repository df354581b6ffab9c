"""LightGBM as the gbdt trainer, the gbdt policy and the trm's screen use it: numpy arrays in,
a `Booster` out, through `lightgbm.Dataset`, `lightgbm.train` and `lightgbm.Booster`.

On import, LightGBM probes for scikit-learn and pandas to offer its `LGBMRanker`-style estimators
and DataFrame inputs; that probe alone costs a stage's child process over a second (scikit-learn
pulls in scipy.stats and pandas), for adapters this project never calls. So `lightgbm` here is
imported with those two packages hidden for the length of its import, unless something already
imported them (then LightGBM sees them as usual, at no extra cost), on x86-64 (elsewhere it is
imported as it is: see below). Nothing else changes: the same library trains and predicts on
the same arrays. Import it from here, inside the function that needs it
(`from worker.models.lgbm import lightgbm`), never at a module's top.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# LightGBM's optional adapters: probed by lightgbm.compat when it is imported, never used here.
ADAPTERS = ("sklearn", "pandas")


@contextmanager
def hidden(names: tuple[str, ...]) -> Iterator[None]:
    """While inside, `import <name>` of each package not yet imported fails with ImportError."""
    absent = [name for name in names if name not in sys.modules]
    for name in absent:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in absent:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


# On aarch64 LightGBM imports scikit-learn first on purpose (its OpenMP runtime must load before
# LightGBM's there, or a later scikit-learn import can fail to allocate its thread-local
# storage): the adapters are hidden on x86-64 alone.
if platform.machine().lower() in ("x86_64", "amd64"):
    with hidden(ADAPTERS):
        import lightgbm
else:
    import lightgbm

__all__ = ["ADAPTERS", "hidden", "lightgbm"]
