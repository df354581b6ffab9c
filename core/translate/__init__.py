"""The original skill's spec files, translated to ours (SPEC §3.3 "Upstream compatibility").

One list of detectors, one per kind of file the skill writes, and one dispatcher used by both
`trm import-spec` and `POST /runs?format=skill`: corpus specs (`corpus`), the published bench
specs (`routerbench-spec.json`, `primehub-*-bench.json`: `benches`), the hill-climb and
routerBench search specs (`search`), `router-training-spec.sample.json` (`training`) and the
PrimeHub bench specs inferred from the skill's text (`benches`). A translation gives a warning
for every key ignored or whose meaning changed and an error for every path that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.schemas.corpus import CorpusSpec
from core.schemas.specs import RUN_SPEC
from core.translate import benches, corpus, search, training
from core.translate.common import Translation


@dataclass(frozen=True)
class Detector:
    name: str
    matches: Callable[[Any], bool]
    translate: Callable[..., Translation]  # (data, base_dir, *, split_by, root) -> Translation
    target: str  # our model the result must validate against, named for messages
    validate: Callable[[dict[str, Any]], Any]


def _corpus_translate(
    data: dict[str, Any], base: Path, *, split_by: str | None, root: Path | None = None
) -> Translation:
    return corpus.translate_corpus_spec(data, base, split_by=split_by, root=root)


def _run_spec(translate: Callable[..., Translation]) -> Callable[..., Translation]:
    def run(
        data: dict[str, Any], base: Path, *, split_by: str | None, root: Path | None = None
    ) -> Translation:
        return translate(data, base, root=root)

    return run


DETECTORS: list[Detector] = [
    Detector(
        "corpus spec",
        corpus.looks_like_skill_corpus_spec,
        _corpus_translate,
        "CorpusSpec",
        CorpusSpec.model_validate,
    ),
    Detector(
        "bench spec",
        benches.looks_like_published_bench_spec,
        _run_spec(benches.translate_published_bench_spec),
        "RunSpec",
        RUN_SPEC.validate_python,
    ),
    Detector(
        "routerBench spec",
        search.looks_like_skill_routerbench_spec,
        _run_spec(search.translate_routerbench_spec),
        "RunSpec",
        RUN_SPEC.validate_python,
    ),
    Detector(
        "hill-climb spec",
        search.looks_like_skill_search_spec,
        _run_spec(search.translate_search_spec),
        "RunSpec",
        RUN_SPEC.validate_python,
    ),
    Detector(
        "PrimeHub bench spec",
        benches.looks_like_skill_primehub_spec,
        _run_spec(benches.translate_primehub_spec),
        "RunSpec",
        RUN_SPEC.validate_python,
    ),
    Detector(
        "router training spec",
        training.looks_like_skill_training_spec,
        _run_spec(training.translate_training_spec),
        "RunSpec",
        RUN_SPEC.validate_python,
    ),
]


def detect(raw: Any) -> Detector | None:
    return next((d for d in DETECTORS if d.matches(raw)), None)


def unknown_file_message() -> str:
    kinds = ", ".join(d.name for d in DETECTORS)
    return f"not a spec file of the original skill we know ({kinds})"


def validation_errors(detector: Detector, translated: dict[str, Any]) -> list[str]:
    """What our model says of a translation (empty: it validates)."""
    try:
        detector.validate(translated)
    except ValidationError as exc:
        return [f"{detector.target}: {e['loc']}: {e['msg']}" for e in exc.errors()]
    return []


def translate_skill_spec(
    raw: Any, base_dir: Path | None = None, *, split_by: str | None = None
) -> Translation:
    """(our run spec, warnings, errors) for one of the skill's spec files, read as JSON.

    Relative paths resolve against `base_dir` (the API passes DATA_DIR; the default is the
    current folder), and every path a file names (nested spec files included) must stay under it
    once symlinks are resolved: an outside path is refused, unread, with one message whether it
    exists or not (`trm import-spec` calls the detectors without a root). A corpus spec alone
    becomes a `train` run of the `trm` trainer on it. An error names the path it is about
    (`corpus_spec.sources[0].path: C:/... does not exist`)."""
    if not isinstance(raw, dict):
        return {}, [], ["body: a spec file of the original skill is a JSON object"]
    detector = detect(raw)
    if detector is None:
        return {}, [], [f"body: {unknown_file_message()}"]
    base = (base_dir or Path.cwd()).resolve()
    spec, warnings, errors = detector.translate(raw, base, split_by=split_by, root=base)
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
