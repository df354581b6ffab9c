"""The skill's bench specs → our `bench` run spec on the bench of the same name (SPEC §7).

Two shapes:
- the published `routerbench-spec.json`, `primehub-envs-bench.json` and
  `primehub-baseline-bench.json` (`run_id`, `data_source`, `anchor_set.envs`, `env_groups`,
  `comparison_mode`, `mutations`, `generalization_ladder`, `plateau_patience`, `maximize_key`,
  `max_generalization_gap`, `scorecard_relpath`, ...): they name no corpus (upstream a search
  over a corpus found elsewhere), so each becomes our bench of the same name over our generated
  data (`specs/benches/<bench>.json`), with a warning saying so. Our bench run does not search:
  its search settings have no counterpart there and each gets a warning naming it and its value
  (a search over a bench's data is a `hillclimb` run, from the skill's hill-climb spec);
- the `run_trm_bench.py --bench ...` style inferred from the skill's text (`bench`/`name`
  naming primehub), whose usual spellings are accepted.
What changes meaning:
- the environments are our offline reasoning families with fixed anchor worlds; a list of
  PrimeHub/verifiers environment ids is ignored (a warning names ours);
- a local results export of a verifiers environment (`results_jsonl`, `results_path`, ...) is
  kept as `results_jsonl`, and must exist;
- `baseline` and `router` (and the published files' `baseline_model`, `router_model`) keep their
  meaning when they name a run or an artifact path; a model name is ignored (we compare
  controllers, not hosted models), and an empty one takes the bench's default;
- an empty `router_model` means what it does upstream, "train one": `router: train`, a bench run
  that first trains a trm router on the bench's train worlds at the size of the file's first
  mutation (`batch_size`, `epochs`, `lr`; `max_examples` has no counterpart: the router trains
  on all the train worlds' rows), then benches it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from core.benches.menu import load_entry
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
    "train_sample": "train_sample",
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


# Keys only the published bench specs carry; a file with any of these and no corpus, base or
# training keys is one of them.
PUBLISHED_MARKERS = {
    "data_source",
    "anchor_set",
    "env_groups",
    "comparison_mode",
    "scorecard_relpath",
}
NOT_A_BENCH = {
    "kind",
    "corpus_spec",
    "corpus",
    "sources",
    "base",
    "base_spec",
    "base_config",
    "base_trainer_config",
    "train_hparams",
    "source_jsonl",
    "router_dataset",
}
# A published mutation's trainer sizes: the router trained for `router_model: ""`.
MUTATION_SIZES = {"batch_size": "batch_size", "epochs": "epochs", "lr": "lr"}
# Our bench runs do not search: these are a hill-climb's (`kind: hillclimb`).
SEARCH_KEYS = {
    "mutations": "each is a trainer config a search would try",
    "generalization_ladder": "the rungs a search climbs",
    "plateau_patience": "when a search stops",
    "max_generalization_gap": "a search's keep ceiling",
    "maximize_key": "a bench reports its anchor accuracy and the router's delta",
}
PRIMEHUB_ENVS = ("gsm8k", "intellect", "mmlu")


def published_bench(data: Any) -> str | None:
    """Which of our benches a published bench spec of the skill stands for (None: not one)."""
    if not isinstance(data, dict) or NOT_A_BENCH & set(data) or not PUBLISHED_MARKERS & set(data):
        return None
    said = " ".join(
        str(data.get(k) or "")
        for k in ("data_source", "run_id", "bench", "name", "comparison_mode")
    )
    squashed = re.sub(r"[\s_-]", "", said.lower())
    anchors = data.get("anchor_set")
    envs = anchors.get("envs") if isinstance(anchors, dict) else anchors
    env_text = " ".join(map(str, envs)).lower() if isinstance(envs, list) else ""
    if "primehub" in squashed or any(e in env_text for e in PRIMEHUB_ENVS):
        return "primehub-baseline" if "baseline" in squashed else "primehub-envs"
    if "routerbench" in squashed or "tesseract" in squashed or "tesseract" in env_text:
        return "routerbench"
    return None


def looks_like_published_bench_spec(data: Any) -> bool:
    return published_bench(data) is not None


def translate_published_bench_spec(
    data: dict[str, Any], base_dir: Path, root: Path | None = None
) -> Translation:
    """(our `bench` spec, warnings, errors) for the skill's published bench specs."""
    reader = Reader(base_dir, root)
    bench = published_bench(data) or "routerbench"
    out: dict[str, Any] = {"kind": "bench", "bench": bench}
    reader.warnings.append(
        f"the file names no corpus: our {bench} bench over our data (specs/benches/{bench}.json: "
        f"{_families(bench)})"
    )
    for key, value in data.items():
        if key == "run_id" and isinstance(value, str) and value:
            out["name"] = value  # the skill's run name
        elif key in ("baseline_model", "router_model"):
            side = key.removesuffix("_model")
            if value in ("", None) and side == "router":
                out["router"] = "train"
                reader.warnings.append(
                    "router_model: empty: a trm router is trained in the bench run first "
                    "(router: train), then benched (name one as `router` to bench a trained one)"
                )
            elif value in ("", None):
                reader.warnings.append(
                    f"{key}: empty: the bench's default {side} (name one as `{side}`: a train "
                    "run id, `RUN:final` of a hill-climb, or an artifact path)"
                )
            else:
                _side(side, value, out, reader, where=key)
        elif key == "data_source":
            reader.warnings.append(f"data_source: {value!r} read as our {bench} bench data")
        elif key == "anchor_set":
            reader.warnings.append(
                f"anchor_set: ignored; {bench}'s anchor worlds are fixed by the bench"
            )
        elif key == "env_groups":
            reader.warnings.append(f"env_groups: ignored; {bench} runs {_families(bench)}")
        elif key == "comparison_mode":
            note = "" if value == "baseline_vs_router" else f" ({value!r} is not ours)"
            reader.warnings.append(
                f"comparison_mode: a bench always compares baseline with router{note}"
            )
        elif key == "trainer_recipe":
            reader.warnings.append(f"trainer_recipe: ignored ({value!r} is a label only)")
        elif key == "scorecard_relpath":
            reader.warnings.append("scorecard_relpath: ignored (the bench writes its report)")
        elif key == "mutations" and data.get("router_model") in ("", None):
            sizes = _mutation_sizes(value, reader)
            if sizes:
                out["router_train"] = sizes
        elif key in SEARCH_KEYS:
            reader.warnings.append(
                f"{key}: ignored ({SEARCH_KEYS[key]}; a bench run does not search: a search "
                f"over bench data is a hillclimb run): {json.dumps(value)[:200]}"
            )
        else:
            _bench_key(key, value, out, reader, bench)
    return out, reader.warnings, reader.errors


def _mutation_sizes(raw: Any, reader: Reader) -> dict[str, Any]:
    """The trm sizes of the router trained for `router_model: ""`: the first mutation's."""
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], dict):
        reader.warnings.append("mutations: ignored (expected a list of {name, batch_size, ...})")
        return {}
    first = raw[0]
    sizes = {MUTATION_SIZES[k]: v for k, v in first.items() if k in MUTATION_SIZES}
    others = sorted(k for k in first if k not in MUTATION_SIZES and k != "name")
    reader.warnings.append(
        f"mutations: the router trained here takes {json.dumps(sizes)} from "
        f"{first.get('name') or 'the first mutation'}"
        + (f"; {', '.join(others)} ignored (no counterpart)" if others else "")
        + (
            f"; {len(raw) - 1} more mutation(s) ignored (a search over them is a hillclimb run)"
            if len(raw) > 1
            else ""
        )
    )
    return sizes


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
        else:
            _bench_key(key, value, out, reader, bench)
    return out, reader.warnings, reader.errors


def _bench_key(key: str, value: Any, out: dict[str, Any], reader: Reader, bench: str) -> None:
    """One key either bench spec shape may carry."""
    if key in COUNT_KEYS:
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


def _side(
    key: str, value: Any, out: dict[str, Any], reader: Reader, where: str | None = None
) -> None:
    where = where or key
    if isinstance(value, dict):
        value = value.get("run_id") or value.get("path") or value.get("artifact")
    if not isinstance(value, str) or not value:
        reader.warnings.append(f"{where}: ignored (expected none, a run id or an artifact path)")
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
        path = reader.path(value, where)
        if path is not None:
            out[key] = str(path.resolve())
        return
    reader.warnings.append(
        f"{where}: {value!r} ignored (not a run id or an existing artifact path; a hosted model "
        "is not a controller); the bench default is used"
    )


def _families(bench: str) -> str:
    try:
        families = load_entry(bench).get("families") or []
    except (KeyError, OSError, ValueError):
        return "its fixed families and anchor worlds"
    return f"the offline families {', '.join(families)} with fixed anchor worlds"
