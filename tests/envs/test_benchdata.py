"""Shipped benches: data generated once from fixed seeds, anchors kept apart from training."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from pydantic import ValidationError

from worker.envs.benchdata import SPEC_DIR, ensure_bench_data, load_bench

SHIPPED = ["routerbench", "primehub-envs", "primehub-baseline"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_bench_specs_name_anchor_worlds_apart_from_training(name: str) -> None:
    bench = load_bench(name)
    assert bench.name == name
    assert set(bench.anchor_worlds).isdisjoint(bench.training_worlds)
    assert set(bench.anchor_worlds) | set(bench.training_worlds) == set(bench.all_worlds)
    for family in bench.families:
        assert any(w.startswith(f"{family}-") for w in bench.anchor_worlds)


def test_primehub_benches_do_not_share_worlds() -> None:
    envs, baseline = load_bench("primehub-envs"), load_bench("primehub-baseline")
    assert set(envs.all_worlds).isdisjoint(baseline.all_worlds)
    assert "route" not in envs.families and "route" in load_bench("routerbench").families


def test_bench_data_is_generated_once_with_its_anchor_worlds(tmp_path: Path) -> None:
    folder = ensure_bench_data("routerbench", tmp_path)
    bench = load_bench("routerbench")
    assert folder == tmp_path / "benches" / "routerbench"
    worlds = sorted(p.name for p in (folder / "worlds").iterdir())
    assert worlds == sorted(bench.all_worlds)
    assert (folder / "router.jsonl").stat().st_size > 0
    stamp = json.loads((folder / "bench_data.json").read_text())
    assert stamp["anchor_worlds"] == ["route-s1000-w8", "route-s1000-w9"]
    assert not set(stamp["anchor_worlds"]) & set(stamp["training_worlds"])
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    assert ensure_bench_data("routerbench", tmp_path) == folder
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    left = [p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock")]
    assert left == ["routerbench"]  # no temp folders left


def test_a_changed_bench_spec_regenerates_its_data(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(SPEC_DIR / "primehub-baseline.json", specs / "mini.json")
    spec = json.loads((specs / "mini.json").read_text())
    spec.update(
        name="mini", families=["grid"], worlds=2, episodes=3, anchor_worlds=["grid-s3000-w1"]
    )
    (specs / "mini.json").write_text(json.dumps(spec))
    folder = ensure_bench_data("mini", tmp_path / "data", spec_dir=specs)
    rows = len((folder / "worlds/grid-s3000-w0/trm_traces.jsonl").read_text().splitlines())
    spec["episodes"] = 6
    (specs / "mini.json").write_text(json.dumps(spec))
    ensure_bench_data("mini", tmp_path / "data", spec_dir=specs)
    more = len((folder / "worlds/grid-s3000-w0/trm_traces.jsonl").read_text().splitlines())
    assert more > rows


def _mini_spec(specs: Path, episodes: int) -> None:
    spec = json.loads((SPEC_DIR / "primehub-baseline.json").read_text())
    spec.update(
        name="mini",
        families=["grid"],
        worlds=2,
        episodes=episodes,
        anchor_worlds=["grid-s3000-w1"],
    )
    (specs / "mini.json").write_text(json.dumps(spec))


def _ensure_and_identify(name: str, data: Path, specs: Path) -> int:
    """What a worker holds after asking: the folder's inode, which a later swap would change."""
    return ensure_bench_data(name, data, spec_dir=specs).stat().st_ino


def test_workers_racing_on_a_stale_bench_generate_it_once_and_keep_it(tmp_path: Path) -> None:
    specs, data = tmp_path / "specs", tmp_path / "data"
    specs.mkdir()
    _mini_spec(specs, episodes=2)
    ensure_bench_data("mini", data, spec_dir=specs)
    _mini_spec(specs, episodes=12)  # every racer finds the landed folder stale
    with ProcessPoolExecutor(max_workers=6) as pool:
        held = list(pool.map(_ensure_and_identify, ["mini"] * 6, [data] * 6, [specs] * 6))
    folder = data / "benches" / "mini"
    # one generation landed; no racer swapped the folder out from under another that had it
    assert held == [folder.stat().st_ino] * 6
    stamp = json.loads((folder / "bench_data.json").read_text())
    assert stamp["fingerprint"] == load_bench("mini", specs).fingerprint()
    assert (folder / "worlds/grid-s3000-w0/trm_traces.jsonl").read_text().splitlines()
    left = sorted(p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock"))
    assert left == ["mini"]


def test_anchor_worlds_that_would_not_be_generated_are_refused(tmp_path: Path) -> None:
    spec = json.loads((SPEC_DIR / "routerbench.json").read_text())
    spec["anchor_worlds"] = ["route-s1000-w10"]
    (tmp_path / "bad.json").write_text(json.dumps(spec))
    with pytest.raises(ValidationError, match="anchor_worlds"):
        load_bench("bad", spec_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="no bench 'nope'"):
        load_bench("nope")
