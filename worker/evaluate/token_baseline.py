"""What a user would pick instead of a feature encoder: a TF-IDF + logistic regression over the
state's text, crossed with the candidate (SPEC §7's references, for the quality bench).

The state is read as its raw JSON text, in character n-grams (so a map kept as row strings, a
prompt or a plan are all tokens to it); each candidate id owns a block of those n-gram weights
(the crossing), so the model learns which text goes with which action, plus a bias per id. A
candidate whose id training never saw scores by the bias of none: 0. One linear model over all
candidates of all train rows, label 1 for the action taken; a row's pick is its best score.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from worker.models.policy import Policy

NGRAMS = (2, 4)
MAX_TERMS = 20_000


class TokenLinearPolicy(Policy):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        self.vectorizer: Any = None
        self.model: Any = None
        self.ids: dict[str, int] = {}
        self.name = "tfidf-lr"
        self.model_hash = ""

    def fit(self, rows: Sequence[dict[str, Any]]) -> TokenLinearPolicy:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.vectorizer = TfidfVectorizer(
            analyzer="char",
            ngram_range=NGRAMS,
            max_features=MAX_TERMS,
            sublinear_tf=True,
            dtype=np.float32,
        )
        states = self.vectorizer.fit_transform([r["state"] for r in rows])
        self.ids = {}
        for row in rows:
            for tool in row["tools"]:
                self.ids.setdefault(tool, len(self.ids))
        x = self._crossed(states, [list(r["tools"]) for r in rows])
        y = np.array([float(t == r["action"]) for r in rows for t in r["tools"]])
        self.model = LogisticRegression(C=4.0, max_iter=2000, random_state=self.seed)
        self.model.fit(x, y)
        digest = hashlib.sha256(repr(sorted(self.ids)).encode())
        digest.update(np.asarray(self.model.coef_).tobytes())
        self.model_hash = digest.hexdigest()
        return self

    def _crossed(self, states: Any, tools: list[list[str]]) -> Any:
        """(candidates, ids * terms + ids): each candidate's row holds its state's n-grams in
        the block of its id (an unseen id: in no block) and its id's bias column."""
        from scipy import sparse

        states = states.tocsr()
        terms, width = states.shape[1], len(self.ids)
        data: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        n = 0
        for r, options in enumerate(tools):
            lo, hi = states.indptr[r], states.indptr[r + 1]
            for tool in options:
                k = self.ids.get(tool)
                if k is not None:
                    data += [states.data[lo:hi], np.ones(1, dtype=states.data.dtype)]
                    cols += [states.indices[lo:hi] + k * terms, np.array([width * terms + k])]
                    rows += [np.full(hi - lo + 1, n)]
                n += 1
        if not data:
            return sparse.csr_matrix((n, width * terms + width))
        return sparse.csr_matrix(
            (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))),
            shape=(n, width * terms + width),
        )

    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        self.forward_passes += 1
        x = self._crossed(self.vectorizer.transform(list(states)), [list(t) for t in tools])
        flat = self.model.decision_function(x)
        out, start = [], 0
        for options in tools:
            out.append([float(v) for v in flat[start : start + len(options)]])
            start += len(options)
        return out
