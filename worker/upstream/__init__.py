"""The original skill's spec files, translated to ours (SPEC §3.3 "Upstream compatibility").

One dispatcher for the API (`POST /runs?format=skill`) over the same detectors `trm import-spec`
uses (`app.cli.importspec.DETECTORS`: corpus specs, the hill-climb and routerBench specs, and the
files translated here: `router-training-spec.sample.json` in `training`, the PrimeHub bench specs
in `benches`). Light: no torch, importable by the API process.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

Translation = tuple[dict[str, Any], list[str], list[str]]


def translate_skill_spec(raw: Any, base_dir: Path | None = None) -> Translation:
    """(our run spec, warnings, errors) for one of the skill's spec files, read as JSON.

    Relative paths resolve against `base_dir` (the API passes DATA_DIR; the default is the
    current folder). A corpus spec alone becomes a `train` run of the `trm` trainer on it. An
    error names the path it is about (`corpus_spec.sources[0].path: C:/... does not exist`)."""
    from app.cli.importspec import DETECTORS

    if not isinstance(raw, dict):
        return {}, [], ["body: a spec file of the original skill is a JSON object"]
    detector = next((d for d in DETECTORS if d.matches(raw)), None)
    if detector is None:
        kinds = ", ".join(d.name for d in DETECTORS)
        return {}, [], [f"body: not a spec file of the original skill we know ({kinds})"]
    args = argparse.Namespace(split_by=None)
    spec, warnings, errors = detector.translate(raw, (base_dir or Path.cwd()).resolve(), args)
    if "kind" not in spec and detector.target == "CorpusSpec":
        spec = {"kind": "train", "trainer": "trm", "corpus": spec}
        warnings = [*warnings, "a corpus spec alone: submitted as a train run (trainer trm)"]
    warnings = [f"{detector.name}: {w}" for w in warnings]
    return spec, warnings, errors


def error_details(errors: list[str]) -> list[dict[str, str]]:
    """The 422 body's `details`: one entry per error, with the field path it names."""
    details = []
    for error in errors:
        field, sep, message = error.partition(": ")
        if not sep or " " in field:
            field, message = "body", error
        details.append({"field": field, "message": message})
    return details
