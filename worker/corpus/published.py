"""The corpus source types that read a published data set (SPEC §4's sources, widened): one
table, type -> its reader, so `sources.py` dispatches them in one place and a new data set is
one row here.

Each reader answers `files_of(source, field)` (the files it will read, or CorpusInputError naming
`field`) and `read_rows(source, files, tally, progress)`. Readers that stand on the external
benches' own code load it on use: `worker/external/` builds corpora, which reads sources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.corpus import bfcl, routellm
from worker.corpus.rows import Row, Tally


@dataclass(frozen=True)
class PublishedReader:
    files_of: Callable[[Any, str], list[Path]]
    read_rows: Callable[[Any, list[Path], Tally, Callable[[int], None]], list[Row]]
    # False where the reader makes its path's contents (generated job-shop instances).
    path_must_exist: bool = True


def _jobshop_files(source: Any, field: str) -> list[Path]:
    from worker.external.jobshop_source import files_of

    return files_of(source, field)


def _jobshop_rows(
    source: Any, files: list[Path], tally: Tally, progress: Callable[[int], None]
) -> list[Row]:
    from worker.external.jobshop_source import read_rows

    return read_rows(source, files, tally, progress)


def _decision_log_files(source: Any, field: str) -> list[Path]:
    from worker.corpus.decision_log import files_of  # it reads rows as sources.py does

    return files_of(source, field)


def _decision_log_rows(
    source: Any, files: list[Path], tally: Tally, progress: Callable[[int], None]
) -> list[Row]:
    from worker.corpus.decision_log import read_rows

    return read_rows(source, files, tally, progress)


READERS: dict[str, PublishedReader] = {
    "routellm": PublishedReader(routellm.files_of, routellm.read_rows),
    "bfcl": PublishedReader(bfcl.files_of, bfcl.read_rows),
    "jobshop": PublishedReader(_jobshop_files, _jobshop_rows, path_must_exist=False),
    # Not a published data set: the service's own decision log, read from its database.
    "decision_log": PublishedReader(_decision_log_files, _decision_log_rows, path_must_exist=False),
}
