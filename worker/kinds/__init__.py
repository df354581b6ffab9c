"""What each kind of run does (SPEC §3.2): one file per kind, reading top to bottom its stages and
its dry run. A new kind is a new file here with its `KIND`, and a line in `MODULES` below.

Light on purpose: the worker process imports it, so no kind imports torch at its top (stages that
train or score run in a child process and import it there). A kind's file is imported the first
time `KINDS` is asked for that kind: a stage's child process loads its own run's kind only (a
train stage never loads the bench or hill-climb code).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from worker.kinds.base import Kind, StageDef

# Kind name -> the module whose `KIND` it is, imported on first use.
MODULES: dict[str, str] = {
    "train": "worker.kinds.train",
    "bench": "worker.kinds.bench",
    "hillclimb": "worker.kinds.hillclimb",
    "selftest": "worker.kinds.selftest",
}


class Kinds(Mapping[str, Kind]):
    """The kinds by name; a kind's module is imported when the kind is first looked up."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        self.modules = dict(modules)
        self.loaded: dict[str, Kind] = {}

    def __getitem__(self, name: str) -> Kind:
        kind = self.loaded.get(name)
        if kind is None:
            kind = importlib.import_module(self.modules[name]).KIND
            if kind.name != name:
                raise LookupError(
                    f"{self.modules[name]} defines the {kind.name!r} kind, not {name!r}"
                )
            self.loaded[name] = kind
        return kind

    def __contains__(self, name: object) -> bool:  # by name, importing nothing
        return name in self.modules

    def __iter__(self) -> Iterator[str]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)


KINDS = Kinds(MODULES)

__all__ = ["KINDS", "MODULES", "Kind", "Kinds", "StageDef"]
