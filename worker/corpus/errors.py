"""The one error the corpus builder raises for bad input (the run fails as `bad_input`)."""

from __future__ import annotations


class CorpusInputError(ValueError):
    """A spec field points at something unusable; raised before anything is written.

    `field` is the path into the corpus spec (`sources[1].path`, `split.anchor`).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
