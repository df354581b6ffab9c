"""A frozen sample of rows and the features `row_features` gave them, from every generated family
(route, grid, rebalance, schedule, verify: `trm envs generate` worlds built into a corpus as
bench/quality.py builds them, at every state compression) and from routerBench: what
test_frozen.py holds the encoder to, so a speed-up cannot change a name, a value or the order.

    .venv/bin/python -m tests.features.frozen   # rewrite data/frozen.json.gz from the code as it is

Rewrite it only when the features are meant to change, and the feature space's FORMAT with them
when a name a fitted space holds changes its value (a new kind's names are in no fitted space, so
an older model reads its rows as before).
"""

from __future__ import annotations

import gzip
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from worker.features.row import row_features

FROZEN = Path(__file__).parent / "data" / "frozen.json.gz"
FAMILIES = ("route", "grid", "rebalance", "schedule", "verify")
COMPRESSIONS = ("full", "keys", "minimal")
PER_CORPUS = 6  # rows kept from each family and compression (and 24 from routerBench)


def encode(state: str, tools: list[str]) -> list[list[list[Any]]]:
    """Each candidate's features as [name, repr(value), type] in the encoder's order: a value
    kept as its repr so 1 and 1.0 (or True) stay apart and a float is compared bit for bit."""
    return [
        [[k, repr(v), type(v).__name__] for k, v in features.items()]
        for features in row_features(state, tools)
    ]


def sample_rows(workdir: Path) -> list[dict[str, Any]]:
    from core.schemas.corpus import CorpusSpec
    from worker.corpus import build_corpus
    from worker.envs import generate
    from worker.envs.benchdata import ensure_bench_data

    rows: list[dict[str, Any]] = []
    pick = random.Random(0)
    for family in FAMILIES:
        play = workdir / f"play-{family}"
        generate(play, families=[family], worlds=4, episodes=6, seed=7)
        for compression in COMPRESSIONS:
            spec = {
                "sources": [{"type": "trm_play_root", "name": family, "path": str(play)}],
                "split": {"by": "env", "seed": 0, "val_fraction": 0.25},
                "knobs": {"namespace_normalization": "auto", "state_compression": compression},
                "contract": "action_only",
            }
            out = workdir / f"corpus-{family}-{compression}"
            build_corpus(CorpusSpec.model_validate(spec), out)
            found = _read(out)
            for r in pick.sample(found, min(PER_CORPUS, len(found))):
                rows.append({"source": f"{family}/{compression}", **r})
    folder = ensure_bench_data("routerbench", workdir / "data")
    root = Path(__file__).resolve().parents[2]
    spec = json.loads((root / "specs" / "train-routerbench-trm.json").read_text())["corpus"]
    spec["sources"][0]["path"] = str(folder)
    build_corpus(CorpusSpec.model_validate(spec), workdir / "corpus-routerbench")
    found = _read(workdir / "corpus-routerbench")
    rows += [{"source": "routerbench", **r} for r in pick.sample(found, 4 * PER_CORPUS)]
    return rows


def _read(corpus: Path) -> list[dict[str, Any]]:
    out = []
    for split in ("train", "val", "anchor"):
        path = corpus / f"{split}.jsonl"
        if path.is_file():
            for line in path.read_text().splitlines():
                r = json.loads(line)
                out.append({"state": r["state"], "tools": list(r["tools"])})
    return out


def load() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(gzip.decompress(FROZEN.read_bytes()))
    return rows


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="trm-frozen-") as tmp:
        rows = sample_rows(Path(tmp))
    for r in rows:
        r["features"] = encode(r["state"], r["tools"])
    FROZEN.parent.mkdir(parents=True, exist_ok=True)
    FROZEN.write_bytes(gzip.compress(json.dumps(rows, separators=(",", ":")).encode(), mtime=0))
    print(f"{len(rows)} rows, {FROZEN.stat().st_size} bytes: {FROZEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
