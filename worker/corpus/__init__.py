"""The corpus builder (SPEC §4): play logs, traces and router rows in; an audited, group-split
corpus out. `build_corpus` is the whole public surface; `sources.py` documents the input formats,
`rows.py` the labels (negatives, recoveries, families), `split.py` the split rule, `knobs.py` the
knobs."""

from worker.corpus.build import CorpusResult, build_corpus
from worker.corpus.errors import CorpusInputError

__all__ = ["CorpusInputError", "CorpusResult", "build_corpus"]
