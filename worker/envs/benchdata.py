"""The shipped benches' data: generated from fixed seeds on first use, once, atomically.

`specs/benches/<name>.json` says what to generate (`families, seed, worlds, episodes, noise,
format`) and which worlds are the bench's anchors (`anchor_worlds`): held out of every training
split, never trained on. The data lands in `DATA_DIR/benches/<name>/` with a `bench_data.json`
stamp; a later call with the same spec returns the folder untouched, a changed spec regenerates it.
Generation goes to a temporary folder that is renamed into place, so a reader never sees half a
bench; a lock file beside the folder makes workers racing on first use generate it once: the
others wait, then find it current.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, model_validator

from worker.envs.families import FAMILIES, world_id
from worker.envs.generate import generate
from worker.envs.writers import FORMATS, dumps

SPEC_DIR = Path(__file__).resolve().parents[2] / "specs" / "benches"
STAMP = "bench_data.json"


class BenchData(BaseModel):
    """The data part of a bench spec; other top-level keys (evaluation settings) are left alone."""

    model_config = ConfigDict(extra="allow")

    name: str
    description: str
    families: list[str] = Field(min_length=1)
    seed: int
    worlds: int = Field(ge=2)
    episodes: int = Field(ge=1)
    noise: float = Field(ge=0.0, le=1.0)
    anchor_worlds: list[str] = Field(min_length=1)
    format: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> BenchData:
        for family in self.families:
            if family not in FAMILIES:
                raise ValueError(f"families: unknown family {family!r}")
        for fmt in self.format:
            if fmt not in FORMATS:
                raise ValueError(f"format: unknown format {fmt!r}")
        generated = set(self.all_worlds)
        for anchor in self.anchor_worlds:
            if anchor not in generated:
                raise ValueError(f"anchor_worlds: {anchor!r} is not one of the generated worlds")
        for family in self.families:
            if not any(w.startswith(f"{family}-") for w in self.training_worlds):
                raise ValueError(f"anchor_worlds: no training world of {family!r} is left")
        return self

    @property
    def all_worlds(self) -> list[str]:
        return [world_id(f, self.seed, i) for f in self.families for i in range(self.worlds)]

    @property
    def training_worlds(self) -> list[str]:
        anchors = set(self.anchor_worlds)
        return [w for w in self.all_worlds if w not in anchors]

    def fingerprint(self) -> str:
        keys = ("families", "seed", "worlds", "episodes", "noise", "format", "anchor_worlds")
        text = dumps({k: getattr(self, k) for k in keys})
        return hashlib.sha256(text.encode()).hexdigest()


def load_bench(name: str, spec_dir: Path | None = None) -> BenchData:
    path = (spec_dir or SPEC_DIR) / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in (spec_dir or SPEC_DIR).glob("*.json"))
        raise FileNotFoundError(f"no bench {name!r} (looked for {path}); known: {', '.join(known)}")
    return BenchData.model_validate(json.loads(path.read_text(encoding="utf-8")))


def ensure_bench_data(name: str, data_dir: Path, spec_dir: Path | None = None) -> Path:
    """`data_dir/benches/<name>/`, generated from the bench spec unless already there."""
    bench = load_bench(name, spec_dir)
    target = Path(data_dir) / "benches" / name
    if _current(target, bench):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{name}.lock")):
        if not _current(target, bench):  # another process may have landed it while we waited
            _generate_into(target, name, bench)
    return target


def _generate_into(target: Path, name: str, bench: BenchData) -> None:
    """Generate the bench in a temporary folder and swap it in; the caller holds the lock."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        generate(
            tmp,
            families=bench.families,
            worlds=bench.worlds,
            episodes=bench.episodes,
            seed=bench.seed,
            noise=bench.noise,
            formats=bench.format,
        )
        stamp = {
            "name": name,
            "fingerprint": bench.fingerprint(),
            "anchor_worlds": bench.anchor_worlds,
            "training_worlds": bench.training_worlds,
        }
        (tmp / STAMP).write_text(dumps(stamp) + "\n", encoding="utf-8")
        if target.exists():  # stale: the spec changed since it was generated
            old = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=target.parent))
            os.replace(target, old / name)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _current(target: Path, bench: BenchData) -> bool:
    try:
        stamp = json.loads((target / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return stamp.get("fingerprint") == bench.fingerprint()
