"""An exported controller (SPEC §7's policy, outside the service): `load(folder)` then
`decide(state, tools)`, or from a shell `python decide.py --rows rows.jsonl`.

This file is the export's `decide.py` (`worker/decide/export.py` writes it with its imports
pointed at the export's own `trm_decide` package). It needs numpy, and `lightgbm` for a gbdt; no
torch and nothing of the service. The folder holds:

    decide.py        this file
    manifest.json    trainer, model hash, feature format, every file with its sha256
    features.json    the fitted feature space (names, train mean and spread)
    model.safetensors + config.json (trm) | model.txt (gbdt)
    trm_decide/      the encoder (features/, encoding.py), the numpy trm, the decision rules

A row is a state (JSON text, or an object: it is serialized as `json.dumps` does) and its
candidate tools; the answer is the action, each candidate's probability (a softmax of the
model's scores), the margin (best less second best) and whether it abstains (`abstain_margin`).
`load` checks every file against the manifest's sha256 first.

    python decide.py --rows rows.jsonl [--abstain-margin 0.2]   # one JSON answer per line
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
FORMAT = "trm-controller-export/1"
PACKAGE = "trm_decide"  # the export's own package: the encoder, the numpy trm, the decision rules
BATCH_ROWS = 256  # rows per trm forward
HERE = Path(__file__).resolve().parent
if (HERE / PACKAGE).is_dir() and str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # found even under `python -I` (no script folder on the path)

from worker.decide.decision import Decision, check_margin, decision  # noqa: E402


@dataclass(frozen=True)
class Model:
    """How an export scores rows: `scores(states, tools_lists)` -> raw scores per candidate."""

    trainer: str
    index: dict[str, int]
    mean: np.ndarray
    scale: np.ndarray
    net: Any  # NumpyTrm (trm) or lightgbm.Booster (gbdt)

    def scores(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        from worker.models.encoding import BLOCKS, raw_matrix, scaled_matrix

        raws = [raw_matrix(self.index, s, list(t)) for s, t in zip(states, tools, strict=True)]
        if self.trainer == "gbdt":
            flat = self.net.predict(np.concatenate(raws), num_threads=1)
            out, start = [], 0
            for raw in raws:
                out.append([float(v) for v in flat[start : start + len(raw)]])
                start += len(raw)
            return out
        from worker.decide.numpy_trm import pad

        blocks = [scaled_matrix(r, self.mean, self.scale) for r in raws]
        result: list[list[float]] = []
        for first in range(0, len(blocks), BATCH_ROWS):
            chunk = blocks[first : first + BATCH_ROWS]
            x, mask = pad(chunk, BLOCKS * len(self.index))
            wide = None
            if self.net.wide_buckets:  # the linear text part reads the row's hashed terms
                from worker.features.wide import wide_terms

                rows = zip(
                    states[first : first + BATCH_ROWS],
                    tools[first : first + BATCH_ROWS],
                    strict=True,
                )
                size, reading = self.net.wide_buckets, self.net.wide_reading
                terms = [wide_terms(s, list(t), size, reading) for s, t in rows]
                wide = self.net.wide_logits(terms, mask.shape[1])
            final = self.net.infer(x, mask, wide)
            result += [[float(v) for v in final[i, : len(b)]] for i, b in enumerate(chunk)]
        return result


class Exported:
    """A loaded export. `trainer`, `model_hash` (the service's hash of the same files) and
    `manifest` as written; `abstain_margin` the threshold under which a decision abstains."""

    def __init__(self, folder: Path, abstain_margin: float | None = None) -> None:
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.trainer: str = self.manifest["trainer"]
        self.model_hash: str = self.manifest["model_hash"]
        self.abstain_margin = check_margin(abstain_margin)
        self.model = load_model(self.folder, self.manifest)

    def decide(self, state: str | dict[str, Any], tools: list[str]) -> Decision:
        return self.decide_rows([(state, tools)])[0]

    def decide_rows(self, rows: Iterable[tuple[str | dict[str, Any], list[str]]]) -> list[Decision]:
        states, tools = [], []
        for n, (state, options) in enumerate(rows):
            if not options or len(set(options)) != len(options):
                raise ValueError(f"rows[{n}].tools: give one or more distinct candidates")
            states.append(state if isinstance(state, str) else json.dumps(state))
            tools.append([str(t) for t in options])
        if not states:
            return []
        scores = self.model.scores(states, tools)
        return [decision(t, s, self.abstain_margin) for t, s in zip(tools, scores, strict=True)]


def load(folder: str | Path = HERE, abstain_margin: float | None = None) -> Exported:
    """The export in `folder` (this file's own by default)."""
    return Exported(Path(folder), abstain_margin)


_DEFAULT: list[Exported] = []


def decide(state: str | dict[str, Any], tools: list[str]) -> Decision:
    """A decision of the export this file belongs to (loaded on first use)."""
    if not _DEFAULT:
        _DEFAULT.append(load())
    return _DEFAULT[0].decide(state, tools)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest, every file it lists checked against its sha256."""
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not an exported controller (no {MANIFEST})")
    manifest: dict[str, Any] = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: format {manifest.get('format')!r}, this file reads {FORMAT}")
    for entry in manifest["files"]:
        digest = hashlib.sha256((folder / entry["path"]).read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            raise ValueError(f"{folder / entry['path']}: changed since export (sha256 differs)")
    return manifest


def load_model(folder: Path, manifest: dict[str, Any]) -> Model:
    space = json.loads((folder / manifest["features"]).read_text())
    if space.get("format") != manifest["features_format"]:
        raise ValueError(f"{folder / manifest['features']}: features of another version")
    index = {name: i for i, name in enumerate(space["names"])}
    mean = np.asarray(space["mean"], dtype=np.float64)
    scale = np.asarray(space["scale"], dtype=np.float64)
    if manifest["trainer"] == "trm":
        from worker.decide.numpy_trm import NumpyTrm

        net: Any = NumpyTrm.load(folder / manifest["weights"], folder / manifest["config"])
    elif manifest["trainer"] == "gbdt":
        import lightgbm

        net = lightgbm.Booster(model_str=(folder / manifest["weights"]).read_text())
    else:
        raise ValueError(f"trainer {manifest['trainer']!r}: this export cannot decide")
    return Model(manifest["trainer"], index, mean, scale, net)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Decide rows with this exported controller.")
    parser.add_argument(
        "--rows", required=True, help="JSON lines with state and tools ('-': stdin)"
    )
    parser.add_argument("--dir", default=str(HERE), help="the export's folder (default: here)")
    parser.add_argument("--abstain-margin", type=float, default=None)
    args = parser.parse_args(argv)
    controller = load(args.dir, args.abstain_margin)
    text = sys.stdin.read() if args.rows == "-" else Path(args.rows).read_text(encoding="utf-8")
    rows = []
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict) or "state" not in row or "tools" not in row:
                print(f"{args.rows} line {n}: not a row with state and tools", file=sys.stderr)
                return 2
            rows.append((row["state"], row["tools"]))
    for first in range(0, len(rows), BATCH_ROWS):
        for d in controller.decide_rows(rows[first : first + BATCH_ROWS]):
            answer = {
                "action": d.action,
                "scores": d.scores,
                "margin": d.margin,
                "abstain": d.abstain,
            }
            print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
