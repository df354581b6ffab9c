"""The corpus of a `trm_grid` run: puzzle sets in, train / val / anchor puzzle sets out.

Sources are `puzzles` sources (core/schemas/puzzles.py `PuzzleSource`), each a folder a
generator wrote (`trm envs generate --families sudoku`, `python -m worker.puzzles`). Every
puzzle read is accounted for in the manifest, as for log rows: kept, a duplicate of one read
before (the same grid), or invalid because the family's oracle rejects its answer (the files are
a user's: a hand-edited answer is counted, never trained on). Sources must share the family and
the grid side (one model reads one shape).

Split, per source, at random in `split.seed`: `anchor_share` of its puzzles held out as the
anchors (the whole source when `split.anchor` names it), then `split.val_fraction` of the rest
as val (at least one puzzle when there are two or more), the rest train. Written as
`corpus/{train,val,anchor}/puzzles.{npz,json}` and `corpus/manifest.json` (counts per source,
the corpus hash over the three sets' arrays).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from core.rundir import MANIFEST, write_json_atomic
from core.schemas.corpus import CorpusSpec
from core.schemas.puzzles import PUZZLE_META, PuzzleSource
from worker.corpus.build import CorpusResult
from worker.corpus.errors import CorpusInputError
from worker.puzzles import PuzzleSet

FORMAT = "trm-puzzle-corpus/1"
SPLITS = ("train", "val", "anchor")


def read_set(source: PuzzleSource, field: str) -> PuzzleSet:
    """The source's puzzles, checked for shape and tokens; CorpusInputError naming `field`."""
    folder = Path(source.path)
    if not (folder / PUZZLE_META).is_file():
        raise CorpusInputError(
            field,
            f"{folder} holds no puzzle set ({PUZZLE_META}); write one with `trm envs generate "
            f"--families sudoku --out DIR` (or maze) under DATA_DIR",
        )
    try:
        made = PuzzleSet.load(folder)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorpusInputError(field, f"{folder}: not a readable puzzle set ({exc})") from None
    cells = made.side * made.side
    if made.inputs.ndim != 2 or made.inputs.shape != made.labels.shape:
        raise CorpusInputError(field, f"{folder}: puzzles and answers differ in shape")
    if made.inputs.shape[1] != cells:
        raise CorpusInputError(field, f"{folder}: {made.inputs.shape[1]} cells, not {cells}")
    for name, array in (("puzzles", made.inputs), ("answers", made.labels)):
        if len(array) and (array.min() < 0 or array.max() >= made.vocab):
            raise CorpusInputError(
                field, f"{folder}: {name} hold tokens outside 0..{made.vocab - 1}"
            )
    return made.take(slice(0, source.limit)) if source.limit else made


def build_puzzle_corpus(spec: CorpusSpec, out_dir: Path, *, dry_run: bool = False) -> CorpusResult:
    """Read, check, dedupe and split the spec's puzzle sources into `out_dir` (nothing is
    written on a dry run, or when a source is unusable: CorpusInputError naming it)."""
    sets: list[tuple[PuzzleSource, PuzzleSet]] = []
    for i, source in enumerate(spec.sources):
        if not isinstance(source, PuzzleSource):
            raise CorpusInputError(f"sources[{i}].type", "a trm_grid corpus reads puzzles only")
        made = read_set(source, f"sources[{i}].path")
        if sets and (made.family, made.side) != (sets[0][1].family, sets[0][1].side):
            first = sets[0][1]
            raise CorpusInputError(
                f"sources[{i}].path",
                f"{made.family} {made.side}x{made.side} puzzles beside {first.family} "
                f"{first.side}x{first.side} ones: one model reads one family and shape",
            )
        sets.append((source, made))
    family, params = sets[0][1].family, sets[0][1].params
    seen: set[bytes] = set()
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in SPLITS}
    per_source: list[dict[str, Any]] = []
    for source, made in sets:
        kind = made.kind
        keep, duplicates, rejected = [], 0, 0
        for i in range(len(made)):
            key = made.inputs[i].tobytes()
            if key in seen:
                duplicates += 1
                continue
            if not kind.check(made.params, made.inputs[i], made.labels[i]):
                rejected += 1
                continue
            seen.add(key)
            keep.append(i)
        order = np.random.default_rng([spec.split.seed, len(per_source)]).permutation(keep)
        whole = source.name in spec.split.anchor
        n_anchor = len(order) if whole else max(1, round(source.anchor_share * len(order)))
        rest = len(order) - n_anchor
        n_val = (
            max(1, round(spec.split.val_fraction * rest))
            if spec.split.val_fraction and rest > 1
            else 0
        )
        picks = {
            "anchor": order[:n_anchor],
            "val": order[n_anchor : n_anchor + n_val],
            "train": order[n_anchor + n_val :],
        }
        for name, index in picks.items():
            index = np.sort(index).astype(np.int64)
            parts[name].append((made.inputs[index], made.labels[index]))
        per_source.append(
            {
                "name": source.name,
                "path": source.path,
                "family": made.family,
                "params": asdict(made.params),
                "puzzles_read": len(made),
                "kept": len(keep),
                "duplicates": duplicates,
                "invalid": {"answer_rejected_by_oracle": rejected} if rejected else {},
                **{name: len(index) for name, index in picks.items()},
            }
        )
    out: dict[str, PuzzleSet] = {}
    digest = hashlib.sha256()
    for name in SPLITS:
        inputs = np.concatenate([p[0] for p in parts[name]]).astype(np.int64)
        labels = np.concatenate([p[1] for p in parts[name]]).astype(np.int64)
        out[name] = PuzzleSet(family, params, inputs, labels)
        digest.update(name.encode() + inputs.tobytes() + labels.tobytes())
    corpus_hash = digest.hexdigest()
    counters = {
        "rows_read": sum(s["puzzles_read"] for s in per_source),
        "rows_kept": sum(s["kept"] for s in per_source),
        "duplicates": sum(s["duplicates"] for s in per_source),
        "rows_invalid": sum(sum(s["invalid"].values()) for s in per_source),
        **{name: len(out[name]) for name in SPLITS},
    }
    manifest = {
        "format": FORMAT,
        "corpus_hash": corpus_hash,
        "task": "whole_answer",
        "family": family,
        "params": asdict(params),
        "split": {
            "seed": spec.split.seed,
            "val_fraction": spec.split.val_fraction,
            "anchor_sources": [s for s in spec.split.anchor],
        },
        "counters": counters,
        "sources": per_source,
    }
    files: dict[str, Path] = {}
    if not dry_run:
        for name, made in out.items():
            made.save(out_dir / name)
            files[name] = out_dir / name / PUZZLE_META
            files[f"{name}_arrays"] = out_dir / name / "puzzles.npz"
        write_json_atomic(out_dir / MANIFEST, manifest)
        files["manifest"] = out_dir / MANIFEST
    warnings = []
    if counters["rows_invalid"]:
        warnings.append(
            f"{counters['rows_invalid']} puzzles left out: the family's oracle rejects their "
            "answers (see the corpus manifest, per source)"
        )
    return CorpusResult(manifest, corpus_hash, files, counters, warnings=warnings)
