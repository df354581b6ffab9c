"""What a controller sees of one row (SPEC §6): each candidate set against the state, as named
numbers. One module per way of reading a state (`ids`, `aligned`, `context`, `cells`, `text`,
`plans`), joined by `row.row_features`; `kinds.py` is the one table of the names they make, and
`explain(name)` reads any of them back. What a state should look like to be read well:
docs/state-rules.md.
"""

from worker.features.kinds import explain
from worker.features.row import candidate_features, row_features

__all__ = ["candidate_features", "explain", "row_features"]
