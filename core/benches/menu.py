"""The bench menu (`specs/benches/*.json`, SPEC §7). Light: json only, so the API can read it.

A bench file holds its data keys (`name, description, families, seed, worlds, episodes, noise,
anchor_worlds, format`: worker/envs/benchdata.py generates the data from them) and evaluation
keys:
    "defaults": {"baseline": "none", "router": "none", "repeats": 1, "trainer": "trm",
                 "episodes": 20, "train_sample": 1000}
              (routerbench's `router` is `train`: a trm router trained in the bench run, sized by
              the spec's `router_train`, else a `router_train` here, else the trm defaults)
    "corpus": {"source": "trm_play_root"|"reasoning_trace", "knobs": {...}}  (how the anchors
              and the `none` baseline's vocabulary are built from the bench data)
    "results_jsonl": null  (primehub-*: a local JSONL export of a verifiers environment's
              results, in the normalized corpus form; relative to DATA_DIR; used instead of the
              generated data when set, and a clear `dependency` error when it is missing. Its
              rows' `meta.world_id` puts them in the anchor worlds or not; rollouts cannot
              replay an export's states, so its failure/recovery rates come from rows tagged
              `meta.kind` (`invalid`, `suboptimal`, ...: known bad picks; `recovery`))

An external bench (a published data set, worker/external/) instead names its data set and where
its data lies:
    "external": "routellm"   (the data set's bench in worker.external.BENCHES)
    "baselines": [...]       (the data set's own baselines; `baseline` names one of them)
    "install": "..."         (what to put where when the data is missing)
    "package": "bfcl-eval"   (optional: the installed package the data comes from when `data`
                              is not given; the worker says what to install when it is missing)
    "defaults": {"baseline": "random", "router": "none", "data": "routellm"}
              (`data`: a folder under DATA_DIR, null with a `package`; a bench run needs a
              trained `router`; jobshop's `instances`: the first N of each anchor set)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).resolve().parents[2] / "specs" / "benches"
DEFAULTS = {
    "baseline": "none",
    "router": "none",
    "repeats": 1,
    "trainer": "trm",
    "episodes": 20,
    "train_sample": 1000,
}


def bench_names(spec_dir: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (spec_dir or SPEC_DIR).glob("*.json"))


def load_entry(name: str, spec_dir: Path | None = None) -> dict[str, Any]:
    """The bench file with its evaluation defaults filled in; KeyError naming the known ones."""
    folder = spec_dir or SPEC_DIR
    path = folder / f"{name}.json"
    if "/" in name or name.startswith(".") or not path.is_file():
        raise KeyError(f"no bench {name!r}; known: {', '.join(bench_names(folder))}")
    entry = json.loads(path.read_text(encoding="utf-8"))
    entry["defaults"] = {**DEFAULTS, **(entry.get("defaults") or {})}
    entry.setdefault("corpus", {"source": "trm_play_root", "knobs": {}})
    entry.setdefault("results_jsonl", None)
    return entry


def external_data(entry: dict[str, Any], requested: str | None) -> str | None:
    """An external bench's data folder name under DATA_DIR: the one asked for, else the entry's
    default; None where the data comes from an installed package."""
    default = entry["defaults"].get("data")
    if requested or default:
        return requested or default
    return None if entry.get("package") else entry["name"]


def menu(spec_dir: Path | None = None) -> list[dict[str, Any]]:
    """What `GET /benches` lists."""
    out = []
    for name in bench_names(spec_dir):
        entry = load_entry(name, spec_dir)
        out.append(
            {
                "name": name,
                "description": entry.get("description"),
                "families": entry.get("families"),
                "anchor_worlds": entry.get("anchor_worlds"),
                "defaults": entry["defaults"],
                "results_jsonl": entry.get("results_jsonl"),
                "external": entry.get("external"),
                "baselines": entry.get("baselines"),
                "package": entry.get("package"),
            }
        )
    return out
