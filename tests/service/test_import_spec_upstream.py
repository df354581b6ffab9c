"""The original skill's published spec files, written in their published shapes
(/work/shared/UPSTREAM.md), through `trm import-spec` (the CLI, a subprocess) and the real API's
`POST /runs?format=skill`: `router-training-spec.sample.json` becomes a qlora train run
over its `source_jsonl`, and the three bench specs become our benches of the same name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.schemas.specs import RUN_SPEC
from tests.conftest import ROOT, Service

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
WIN_DATASET = (
    "D:/Research_Engine/tesseract_persistent/data/router/tesseract-router-dataset-v1.jsonl"
)
PRIMEHUB_ENVS = [
    "gsm8k",
    "intellect-3-rl/math",
    "intellect-3-rl/logic",
    "intellect-3-rl/science",
    *(f"mmlu/{s}" for s in ("abstract_algebra", "anatomy", "astronomy", "college_cs", "law")),
    "mmlu/college_physics",
    "mmlu/econometrics",
]


def import_spec(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "import-spec", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def router_rows(path: Path) -> Path:
    rows = [
        {"input": {"prompt_text": "sum 2+2"}, "output": {"route": "TRM_ONLY"}},
        {"input": {"prompt_text": "write a poem"}, "output": {"route": "LLM_DIRECT"}},
        {"input": {"prompt_text": "plan a route"}, "output": {"route": "TRM_THEN_LLM"}},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def training_spec(source_jsonl: str, run_id: str, **hparams: Any) -> dict[str, Any]:
    """router-training-spec.sample.json as published (values varied by the caller)."""
    return {
        "run_id": run_id,
        "trainer_recipe": "persistent_tesseract_qlora",
        "trainer_script": "D:/Research_Engine/prime_lab/storyworld_sft/train_qlora_sft.py",
        "corpus_builder_script": "../scripts/build_router_training_corpus.py",
        "source_jsonl": source_jsonl,
        "messages_jsonl": f"../runs/{run_id}/router_messages.jsonl",
        "output_dir": f"../runs/{run_id}/trainer_outputs",
        "model": "",
        "baseline_model": "",
        "benchmark_spec": "primehub-envs-bench.json",
        "train_hparams": {
            "max_steps": 200,
            "seq_len": 512,
            "batch_size": 1,
            "lr": 0.0002,
            "grad_accum": 16,
            "lora_r": 16,
            "lora_alpha": 32,
            "lora_dropout": 0.05,
            "target_modules": "q_proj,k_proj,v_proj,o_proj",
            "streaming": True,
            **hparams,
        },
    }


def bench_spec(kind: str, max_examples: int = 8, gap: float = 0.15) -> dict[str, Any]:
    """routerbench-spec.json / primehub-envs-bench.json / primehub-baseline-bench.json."""
    spec: dict[str, Any] = {
        "run_id": {"routerbench": "trm_routerBench", "envs": "trm_primehubEnvs"}.get(
            kind, "trm_primehubBaseline"
        ),
        "data_source": {
            "routerbench": "persistent-tesseract",
            "envs": "primehub-reasoning-subset",
        }.get(kind, "primehub-reasoning-subset-vs-baseline"),
        "trainer_recipe": "persistent_tesseract_qlora",
        "baseline_model": "",
        "router_model": "",
        "anchor_set": {
            "envs": ["persistent-tesseract"] if kind == "routerbench" else PRIMEHUB_ENVS
        },
        "mutations": [
            {"name": "m1", "batch_size": 4, "epochs": 1, "lr": 0.0002, "max_examples": max_examples}
        ],
        "generalization_ladder": [
            {"generalization_level": 0, "label": "in_domain"},
            {"generalization_level": 2, "label": "cross_run"},
        ],
        "plateau_patience": 1,
        "maximize_key": "anchor_score",
        "max_generalization_gap": gap,
        "scorecard_relpath": "scorecard.json",
    }
    if kind != "routerbench":
        spec["env_groups"] = {
            "requested_alias": PRIMEHUB_ENVS[:4],
            "math": ["gsm8k", "intellect-3-rl/math"],
            "logic": ["intellect-3-rl/logic"],
            "science": ["intellect-3-rl/science", "mmlu/college_physics"],
            "cs": ["mmlu/college_cs"],
            "broad": PRIMEHUB_ENVS,
        }
    if kind == "baseline":
        spec["comparison_mode"] = "baseline_vs_router"
    return spec


@pytest.mark.parametrize(
    "windows_path",
    [
        WIN_DATASET,
        r"C:\Users\me\tesseract_persistent\data\router\tesseract-router-dataset-v1.jsonl",
    ],
)
def test_router_training_spec_with_the_skills_windows_default_names_the_missing_dataset(
    tmp_path: Path, windows_path: str
) -> None:
    src = write(tmp_path / "router-training-spec.sample.json", training_spec(windows_path, "r1"))
    out = import_spec(src, "--out", str(tmp_path / "ours.json"))
    assert out.returncode == 2, out.stderr
    assert "not a spec file" not in out.stderr
    [error] = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert "source_jsonl:" in error and "tesseract-router-dataset-v1.jsonl does not exist" in error
    assert not (tmp_path / "ours.json").exists()


@pytest.mark.parametrize(
    ("run_id", "hparams", "overrides", "expected"),
    [
        (
            "trm_routerTrain",
            {},
            None,
            {
                "max_steps": 200,
                "max_seq_len": 512,
                "micro_batch": 1,
                "lr": 0.0002,
                "grad_accum": 16,
                "r": 16,
                "alpha": 32,
                "dropout": 0.05,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            },
        ),
        (
            "router_small",
            {
                "max_steps": 40,
                "seq_len": 256,
                "batch_size": 2,
                "lr": 0.0001,
                "grad_accum": 4,
                "lora_r": 8,
                "lora_alpha": 16,
                "lora_dropout": 0.1,
                "target_modules": "q_proj, v_proj",
                "streaming": False,
            },
            {"train": {"lr": 0.0003, "lora_r": 4}},
            {
                "max_steps": 40,
                "max_seq_len": 256,
                "micro_batch": 2,
                "lr": 0.0003,
                "grad_accum": 4,
                "r": 4,
                "alpha": 16,
                "dropout": 0.1,
                "target_modules": ["q_proj", "v_proj"],
            },
        ),
    ],
)
def test_router_training_spec_becomes_a_qlora_run_over_its_source_jsonl(
    tmp_path: Path,
    run_id: str,
    hparams: dict[str, Any],
    overrides: dict[str, Any] | None,
    expected: dict[str, Any],
) -> None:
    dataset = router_rows(tmp_path / "data" / "router" / "dataset.jsonl")
    raw = training_spec("data/router/dataset.jsonl", run_id, **hparams)
    if overrides is not None:
        raw["trainer_overrides"] = overrides
    src = write(tmp_path / "references" / "router-training-spec.sample.json", raw)
    src.parent.joinpath("data").symlink_to(tmp_path / "data")  # relative to the file's folder
    out = import_spec(src, "--out", str(tmp_path / "ours.json"))
    assert out.returncode == 0, out.stderr
    spec = json.loads((tmp_path / "ours.json").read_text())
    RUN_SPEC.validate_python(spec)
    assert (spec["kind"], spec["trainer"], spec["name"]) == ("train", "qlora", run_id)
    [source] = spec["corpus"]["sources"]
    assert source["type"] == "router_jsonl"
    assert Path(source["path"]).resolve() == dataset.resolve()
    assert spec["qlora"] == expected  # `model: ""` leaves the built-in base model
    for ignored in (
        "trainer_recipe",
        "trainer_script",
        "corpus_builder_script",
        "messages_jsonl",
        "output_dir",
        "baseline_model",
        "benchmark_spec",
        "train_hparams.streaming",
    ):
        assert f"warning: {src}: {ignored}: " in out.stderr, ignored


@pytest.mark.parametrize(
    ("file", "kind", "bench"),
    [
        ("routerbench-spec.json", "routerbench", "routerbench"),
        ("primehub-envs-bench.json", "envs", "primehub-envs"),
        ("primehub-baseline-bench.json", "baseline", "primehub-baseline"),
    ],
)
def test_published_bench_specs_become_our_bench_of_the_same_name(
    tmp_path: Path, file: str, kind: str, bench: str
) -> None:
    src = write(tmp_path / file, bench_spec(kind, max_examples=12, gap=0.2))
    out = import_spec(src)
    assert out.returncode == 0, out.stderr
    spec = json.loads(out.stdout)
    RUN_SPEC.validate_python(spec)
    # `router_model: ""`: a router trained in the bench run, at the first mutation's size.
    assert spec == {
        "kind": "bench",
        "bench": bench,
        "name": bench_spec(kind)["run_id"],
        "router": "train",
        "router_train": {"batch_size": 4, "epochs": 1, "lr": 0.0002},
    }
    assert f"our {bench} bench over our data" in out.stderr
    assert "mutations: the router trained here takes" in out.stderr
    for key in ("generalization_ladder", "plateau_patience", "max_generalization_gap"):
        assert f"{key}: ignored" in out.stderr and "a bench run does not search" in out.stderr
    for key in ("data_source", "anchor_set", "trainer_recipe", "scorecard_relpath"):
        assert f"warning: {src}: {key}: " in out.stderr, key


@SQLITE_ONLY
def test_post_runs_format_skill_takes_the_published_files_and_the_bench_dry_runs(
    service: Service, env: dict[str, str], tmp_path: Path
) -> None:
    data_dir = Path(env["TRM_DATA_DIR"])
    router_rows(data_dir / "router" / "dataset.jsonl")
    train = service.http.post(
        "/runs",
        params={"format": "skill"},
        json=training_spec("router/dataset.jsonl", "trm_routerTrain"),
    )
    assert train.status_code == 202, train.text
    body = train.json()
    assert body["kind"] == "train" and body["translated_spec"]["trainer"] == "qlora"
    qlora = body["translated_spec"]["qlora"]
    assert qlora["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert any("benchmark_spec: ignored" in w for w in body["warnings"])
    queued_ids = [body["id"]]

    missing = service.http.post(
        "/runs", params={"format": "skill"}, json=training_spec(WIN_DATASET, "r2")
    )
    assert missing.status_code == 422, missing.text
    [detail] = missing.json()["error"]["details"]
    assert detail["field"] == "source_jsonl"
    assert "tesseract-router-dataset-v1.jsonl does not exist" in detail["message"]

    benches = [("routerbench", "routerbench"), ("envs", "primehub-envs")]
    for kind, bench in [*benches, ("baseline", "primehub-baseline")]:
        # As published (`router_model: ""`): no corpus error; a router trained in the run.
        bare = service.http.post("/runs", params={"format": "skill"}, json=bench_spec(kind))
        assert bare.status_code == 202, bare.text
        assert bare.json()["translated_spec"]["router"] == "train"
        queued_ids.append(bare.json()["id"])
        raw = {**bench_spec(kind), "router_model": body["id"]}  # the train run above
        queued = service.http.post("/runs", params={"format": "skill"}, json=raw)
        assert queued.status_code == 202, queued.text
        run = queued.json()
        assert (run["kind"], run["translated_spec"]["bench"]) == ("bench", bench)
        assert run["translated_spec"]["router"] == body["id"]
        assert any(
            w.endswith(f"our {bench} bench over our data") or f"our {bench} bench" in w
            for w in run["warnings"]
        )
        assert any("mutations: ignored" in w for w in run["warnings"])  # the router is named
        queued_ids.append(run["id"])
    for run_id in queued_ids:  # real runs: not this test's business to train and bench them
        assert service.http.post(f"/runs/{run_id}/cancel").status_code == 202

    src = write(tmp_path / "routerbench-spec.json", bench_spec("routerbench"))
    out = import_spec(src)
    assert out.returncode == 0, out.stderr
    dry = service.http.post("/runs", json={**json.loads(out.stdout), "dry_run": True})
    assert dry.status_code == 202, dry.text
    service.start_worker()
    done = service.wait_status(dry.json()["id"], "completed", "failed", timeout=180)
    assert done["status"] == "completed", done
    assert done["kind"] == "bench" and done["dry_run"] is True
