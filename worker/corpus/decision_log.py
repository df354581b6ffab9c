"""The `decision_log` source (core/schemas/sources.py `DecisionLogSource`): a named controller's
logged decisions and their reported outcomes (core/decisions.py), read from the service's
database, as corpus rows of the shape every source gives.

- state and tools as the controller was asked; action = the action it chose.
- meta: `decision_id`, `controller`, `version`, `success`, `reward` (when reported), `notes`,
  `abstain`, `margin`, `decided_at`; env = run = `<controller>@v<version>`, episode = the
  decision id, so a split by run holds one version's decisions out together.
- `outcomes: success_only` keeps the decisions that succeeded; `all` keeps the failed ones too,
  as negatives (`kind: failed_outcome`), which go to critic.jsonl and are never imitated.
- Left out, each counted under its reason in the manifest: `no_outcome` (none reported yet),
  `failed_outcome` (success_only), `missing_action` (the controller chose none), `missing_state`.
- Unknown controller: CorpusInputError naming `sources[i].controller`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlmodel import Session

from core.db import get_engine
from core.decisions import read_for_corpus
from core.models import Controller, DecisionRecord
from core.schemas.sources import DecisionLogSource
from core.settings import get_settings
from worker.corpus.errors import CorpusInputError
from worker.corpus.rows import Invalid, Row, Tally, env_family, state_text

LABEL = "decisions"  # the "file" the manifest's first_lines name: the decision log


def files_of(source: DecisionLogSource, field: str) -> list[Path]:
    """No files: checks the controller is known, naming `sources[i].controller` when not."""
    with Session(get_engine(get_settings())) as session:
        if session.get(Controller, source.controller) is None:
            where = field.rsplit(".", 1)[0] + ".controller"
            raise CorpusInputError(where, f"no controller {source.controller!r} logs decisions")
    return []


def read_rows(
    source: DecisionLogSource, _files: list[Path], tally: Tally, _progress: Callable[[int], None]
) -> list[Row]:
    with Session(get_engine(get_settings())) as session:
        records = read_for_corpus(session, source.controller, source.versions, source.max_rows)
    tally.files = [LABEL]
    rows: list[Row] = []
    for n, record in enumerate(records, 1):
        tally.rows_read += 1
        try:
            rows.append(_row(source, record))
        except Invalid as bad:
            tally.reject(bad.reason, LABEL, n)
            continue
        kind = rows[-1].meta.get("kind")
        if kind:
            tally.kinds[kind] = tally.kinds.get(kind, 0) + 1
    return rows


def _row(source: DecisionLogSource, record: DecisionRecord) -> Row:
    if record.success is None:
        raise Invalid("no_outcome")
    if not record.success and source.outcomes == "success_only":
        raise Invalid("failed_outcome")
    if record.action is None or record.action not in record.tools:
        raise Invalid("missing_action")
    state, state_obj = state_text(record.state)
    where = f"{record.name}@v{record.version}"
    meta: dict[str, Any] = {
        "source_name": source.name,
        "source_type": source.type,
        "env": where,
        "run": where,
        "path": LABEL,
        "line": None,
        "episode": record.id,
        "family": env_family(record.name),
        "decision_id": record.id,
        "controller": record.name,
        "version": record.version,
        "success": record.success,
        "reward": record.reward,
        "abstain": record.abstain,
        "margin": record.margin,
        "decided_at": record.decided_at.isoformat(),
    }
    if record.notes:
        meta["notes"] = record.notes
    negative = not record.success
    if negative:
        meta["kind"] = "failed_outcome"
    return Row(
        state,
        state_obj,
        list(record.tools),
        record.action,
        meta,
        source.name,
        where,
        where,
        record.id,
        meta["family"],
        negative,
        False,
    )
