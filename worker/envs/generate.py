"""Generate play logs for a set of families: the code behind `trm envs generate` and the benches.

Deterministic: the same arguments write byte-identical files (no clocks, no set ordering, string
seeds). The folder also gets `envs_manifest.json`: what was generated, per-world counts, each
file's rows and sha256, and ready-made `sources[]` entries for a corpus spec.
"""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.envs.families import FAMILIES, make_world
from worker.envs.play import play_episode
from worker.envs.writers import (
    FORMATS,
    REASONING_TRACE_SOURCE,
    ROUTER_FILE,
    TRACE_FILE,
    PlayLogWriter,
    dumps,
)

MANIFEST = "envs_manifest.json"
# What a generation owns inside its folder (and so what `replace=True` may delete).
OWNED = ("worlds", ROUTER_FILE, TRACE_FILE, MANIFEST)


@dataclass
class Generated:
    out: Path
    manifest: dict[str, Any]

    @property
    def files(self) -> list[dict[str, Any]]:
        return self.manifest["files"]

    @property
    def rows(self) -> int:
        return sum(f["rows"] for f in self.files)


def check_families(families: list[str]) -> list[str]:
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    if not families:
        raise ValueError("no family given")
    return list(dict.fromkeys(families))


def generate(
    out: Path,
    *,
    families: list[str],
    worlds: int,
    episodes: int,
    seed: int,
    noise: float = 0.2,
    formats: list[str] | tuple[str, ...] = ("trm_play_root",),
    replace: bool = False,
) -> Generated:
    """Play `episodes` episodes in each of `worlds` worlds per family and write `formats`."""
    families = check_families(families)
    if worlds < 1 or episodes < 1:
        raise ValueError("worlds and episodes must be at least 1")
    if not 0.0 <= noise <= 1.0:
        raise ValueError("noise must be between 0 and 1")
    formats = list(dict.fromkeys(formats))
    if "router_jsonl" in formats and "route" not in families:
        raise ValueError("router_jsonl needs the route family")
    out = Path(out)
    existing = [name for name in OWNED if (out / name).exists()]
    if existing and not replace:
        raise FileExistsError(f"{out} already holds generated data ({existing[0]})")
    for name in existing:
        path = out / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    writer = PlayLogWriter(out, formats)
    detail = []
    try:
        for family in families:
            for index in range(worlds):
                world = make_world(family, seed, index)
                turns = [t for e in range(episodes) for t in play_episode(world, e, noise)]
                writer.add(world, turns)
                detail.append(
                    {
                        "world_id": world.world_id,
                        "family": family,
                        "rows": len(turns),
                        "kinds": dict(sorted(Counter(t.kind for t in turns).items())),
                        "outcomes": dict(sorted(Counter(t.outcome for t in turns).items())),
                    }
                )
    finally:
        writer.close()

    files = [
        {"path": name, "rows": rows, "sha256": _sha256(out / name)}
        for name, rows in sorted(writer.rows.items())
    ]
    manifest = {
        "generator": "worker.envs",
        "families": families,
        "worlds": worlds,
        "episodes": episodes,
        "seed": seed,
        "noise": noise,
        "formats": formats,
        "world_ids": [d["world_id"] for d in detail],
        "per_world": detail,
        "files": files,
        "sources": corpus_sources(formats),
    }
    (out / MANIFEST).write_text(dumps(manifest) + "\n", encoding="utf-8")
    return Generated(out, manifest)


def corpus_sources(formats: list[str]) -> list[dict[str, Any]]:
    """`sources[]` entries (SPEC §4) that read what was written, paths relative to `out`."""
    sources: list[dict[str, Any]] = []
    if "trm_play_root" in formats:
        sources.append({"type": "trm_play_root", "name": "play", "path": "."})
    if "router_jsonl" in formats:
        sources.append({"type": "router_jsonl", "name": "router", "path": ROUTER_FILE})
    if "reasoning_trace" in formats:
        sources.append(dict(REASONING_TRACE_SOURCE))
    return sources


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["FORMATS", "MANIFEST", "Generated", "check_families", "generate"]
