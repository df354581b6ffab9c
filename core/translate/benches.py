"""The skill's PrimeHub bench specs (`primehub-envs-bench.json`, `primehub-baseline-bench.json`,
its `run_trm_bench.py --bench ...`) → our `bench` run spec on the bench of the same name
(`specs/benches/primehub-*.json`, SPEC §7).

Their files are inferred from the skill's text, so the usual spellings are accepted. What changes
meaning:
- the environments are our offline reasoning families with fixed anchor worlds; a list of
  PrimeHub/verifiers environment ids is ignored (a warning names ours);
- a local results export of a verifiers environment (`results_jsonl`, `results_path`, ...) is
  kept as `results_jsonl`, and must exist;
- `baseline` and `router` keep their meaning when they name a run or an artifact path; a model
  name there or in `model` is ignored (we compare controllers, not hosted models).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from core.translate.common import WINDOWS_PATH, Translation
from core.translate.reader import Reader

BENCHES = ("primehub-envs", "primehub-baseline")
# A run id (ULID), optionally `:root` / `:final` for a hill-climb.
RUN_REF = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}(?::(?:root|final))?$")
RESULTS_KEYS = (
    "results_jsonl",
    "results_path",
    "results",
    "verifiers_results",
    "export_jsonl",
    "export_path",
)
COUNT_KEYS = {
    "episodes": "episodes",
    "num_episodes": "episodes",
    "num_examples": "episodes",
    "n_examples": "episodes",
    "repeats": "repeats",
    "rollouts_per_example": "repeats",
    "num_rollouts": "repeats",
    "seed": "seed",
}
ENV_KEYS = ("envs", "environments", "env_ids", "env_list", "families", "tasks")
MODEL_KEYS = ("model", "base_model", "model_name", "endpoint", "api_base", "sampling_args")
IGNORED = {
    "output_root": "a bench writes under its run directory",
    "output_dir": "a bench writes under its run directory",
    "run_root": "a bench writes under its run directory",
    "run_id": "the service names runs",
    "template_root": "our bench data is generated under DATA_DIR/benches",
    "python": "the worker runs the evaluation itself",
    "hermes": "the worker runs the evaluation itself",
    "evaluator": "scored by the bench's evaluate stage",
    "evaluator_command": "scored by the bench's evaluate stage",
    "watch": "follow the run with GET /runs/{id}/events or trm watch",
    "description": "kept nowhere",
}


def bench_named(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    raw = " ".join(str(data.get(k) or "") for k in ("bench", "bench_name", "name", "id")).lower()
    squashed = raw.replace("_", "-").replace(" ", "-")
    if "primehub" not in squashed.replace("-", ""):
        return None
    return "primehub-baseline" if "baseline" in squashed else "primehub-envs"


def looks_like_skill_primehub_spec(data: Any) -> bool:
    return isinstance(data, dict) and "kind" not in data and bench_named(data) is not None


def translate_primehub_spec(
    data: dict[str, Any], base_dir: Path, root: Path | None = None
) -> Translation:
    """(our `bench` spec, warnings, errors) for the skill's `primehub-*-bench.json`."""
    reader = Reader(base_dir, root)
    bench = bench_named(data) or "primehub-envs"
    out: dict[str, Any] = {"kind": "bench", "bench": bench}
    for key, value in data.items():
        if key in ("bench", "bench_name", "id"):
            continue
        if key in ("name", "run_name"):
            if str(value).lower().replace("_", "-") not in BENCHES:
                out["name"] = value
        elif key in COUNT_KEYS:
            out[COUNT_KEYS[key]] = value
        elif key in ("baseline", "router"):
            _side(key, value, out, reader)
        elif key in RESULTS_KEYS:
            path = reader.path(value, key)
            if path is not None:
                out["results_jsonl"] = str(path.resolve())
                if key != "results_jsonl":
                    reader.warnings.append(f"{key}: now results_jsonl")
        elif key in ("dry_run", "probe"):
            out[key] = bool(value)
        elif key == "trainer":
            if value in ("trm", "qlora"):
                out["trainer"] = value
            else:
                reader.warnings.append(f"trainer: {value!r} is not ours (trm, qlora); ignored")
        elif key in ENV_KEYS:
            reader.warnings.append(f"{key}: ignored; {bench} runs {_families(bench)}")
        elif key in MODEL_KEYS:
            reader.warnings.append(
                f"{key}: ignored (a bench compares `baseline` with `router`: none, a run id, "
                "or an artifact path)"
            )
        elif key in IGNORED:
            reader.warnings.append(f"{key}: ignored ({IGNORED[key]})")
        else:
            reader.warnings.append(f"{key}: ignored (no counterpart in our bench spec)")
    return out, reader.warnings, reader.errors


def _side(key: str, value: Any, out: dict[str, Any], reader: Reader) -> None:
    if isinstance(value, dict):
        value = value.get("run_id") or value.get("path") or value.get("artifact")
    if not isinstance(value, str) or not value:
        reader.warnings.append(f"{key}: ignored (expected none, a run id or an artifact path)")
        return
    if value == "none" or RUN_REF.match(value):
        out[key] = value
        return
    looks_like_path = (
        value.startswith((".", "/", "~"))
        or WINDOWS_PATH.match(value)
        or value.endswith((".json", ".safetensors"))
        or reader.names_a_path(value)
    )
    if looks_like_path:
        path = reader.path(value, key)
        if path is not None:
            out[key] = str(path.resolve())
        return
    reader.warnings.append(
        f"{key}: {value!r} ignored (not a run id or an existing artifact path; a hosted model "
        "is not a controller); the bench default is used"
    )


def _families(bench: str) -> str:
    menu = Path(__file__).resolve().parents[2] / "specs" / "benches" / f"{bench}.json"
    try:
        families = json.loads(menu.read_text()).get("families") or []
    except (OSError, ValueError):
        return "its fixed families and anchor worlds"
    return f"the offline families {', '.join(families)} with fixed anchor worlds"
