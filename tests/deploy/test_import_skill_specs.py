"""The skill's router training and PrimeHub bench specs, through `trm import-spec` and
`POST /runs?format=skill`: translated, a warning per ignored key, an error per missing path."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import importspec as importspec_cli
from core.schemas.specs import RUN_SPEC
from core.translate import error_details, translate_skill_spec
from tests.conftest import Service


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="trm")
    sub = parser.add_subparsers(dest="verb", required=True)
    importspec_cli.register(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _router_rows(path: Path) -> Path:
    rows = [
        {"input": {"prompt_text": "sum 2+2"}, "output": {"route": "TRM_ONLY", "intent": "math"}},
        {"input": {"prompt_text": "write"}, "output": {"route": "LLM_DIRECT", "intent": "prose"}},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


TRAINING = {
    "run_name": "router-qlora-sample",
    "router_dataset": "data/router.jsonl",
    "output_dir": "C:/projects/persistent-tesseract/runs/router",
    "trainer": {
        "script": "train_qlora_sft.py",
        "base_model": "smollm2-135m-instruct",
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "lora_r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.1,
        "target_modules": "q_proj,k_proj,v_proj,o_proj",
        "learning_rate": 1e-4,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 4,
        "max_seq_length": 512,
        "num_train_epochs": 2,
        "warmup_ratio": 0.03,
    },
}


def test_router_training_spec_becomes_a_qlora_train_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _router_rows(tmp_path / "data" / "router.jsonl")
    out = tmp_path / "ours.json"
    src = _write(tmp_path / "router-training-spec.sample.json", TRAINING)
    assert run("import-spec", str(src), "--out", str(out)) == 0
    spec = json.loads(out.read_text())
    RUN_SPEC.validate_python(spec)
    assert spec["kind"] == "train" and spec["trainer"] == "qlora"
    assert spec["name"] == "router-qlora-sample"
    assert spec["qlora"] == {
        "base_model": "smollm2-135m-instruct",
        "r": 8,
        "alpha": 16,
        "dropout": 0.1,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "lr": 1e-4,
        "micro_batch": 2,
        "grad_accum": 4,
        "max_seq_len": 512,
        "epochs": 2,
    }
    [source] = spec["corpus"]["sources"]
    assert source["type"] == "router_jsonl"
    assert source["path"] == str((tmp_path / "data" / "router.jsonl").resolve())
    err = capsys.readouterr().err
    for key in ("output_dir", "trainer.script", "trainer.load_in_4bit", "trainer.warmup_ratio"):
        assert f"warning: {src}: {key}: ignored" in err


def test_router_training_spec_with_their_windows_defaults_names_each_missing_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = dict(TRAINING, router_dataset="C:/projects/persistent-tesseract/data/router.jsonl")
    spec["corpus_spec"] = "/mnt/c/projects/hermes/corpus-spec.json"
    src = _write(tmp_path / "router-training-spec.sample.json", spec)
    assert run("import-spec", str(src)) == 2
    err = capsys.readouterr().err
    assert (
        "router_dataset: C:/projects/persistent-tesseract/data/router.jsonl does not exist" in err
    )
    assert "corpus_spec: /mnt/c/projects/hermes/corpus-spec.json does not exist" in err
    assert "nothing written" in err


def test_primehub_bench_specs_become_bench_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "exports" / "results.jsonl"
    results.parent.mkdir()
    results.write_text("")
    envs = {
        "bench": "primehub-envs",
        "environments": ["primehub/logic", "primehub/math"],
        "model": "Qwen/Qwen3-4B",
        "num_examples": 12,
        "rollouts_per_example": 2,
        "results_path": "exports/results.jsonl",
        "output_root": "C:/projects/bench-out",
    }
    out = tmp_path / "envs.json"
    assert (
        run(
            "import-spec",
            str(_write(tmp_path / "primehub-envs-bench.json", envs)),
            "--out",
            str(out),
        )
        == 0
    )
    spec = json.loads(out.read_text())
    assert spec == {
        "kind": "bench",
        "bench": "primehub-envs",
        "episodes": 12,
        "repeats": 2,
        "results_jsonl": str(results.resolve()),
    }
    err = capsys.readouterr().err
    assert "environments: ignored" in err and "model: ignored" in err
    assert "output_root: ignored" in err

    baseline = {"name": "primehub-baseline", "baseline": "none", "router": "none"}
    out2 = tmp_path / "baseline.json"
    src = _write(tmp_path / "primehub-baseline-bench.json", baseline)
    assert run("import-spec", str(src), "--out", str(out2)) == 0
    assert json.loads(out2.read_text()) == {
        "kind": "bench",
        "bench": "primehub-baseline",
        "baseline": "none",
        "router": "none",
    }


def test_primehub_results_on_a_windows_path_is_an_error(tmp_path: Path) -> None:
    spec, _warnings, errors = translate_skill_spec(
        {"bench": "primehub-baseline", "results_jsonl": "C:\\exports\\results.jsonl"}, tmp_path
    )
    assert errors == [
        "results_jsonl: C:\\exports\\results.jsonl does not exist (a Windows default of the "
        "original skill: point it at your copy)"
    ]
    assert error_details(errors)[0]["field"] == "results_jsonl"


def test_dispatch_covers_every_detector(tmp_path: Path) -> None:
    _router_rows(tmp_path / "router.jsonl")
    corpus = {
        "sources": [{"type": "router_jsonl", "name": "r", "path": "router.jsonl"}],
        "train_ratio": 0.8,
    }
    spec, warnings, errors = translate_skill_spec(corpus, tmp_path)
    assert not errors and spec["kind"] == "train" and spec["corpus"]["split"]["val_fraction"] == 0.2
    assert any("corpus spec alone" in w for w in warnings)
    spec, _, errors = translate_skill_spec({"bench": "routerbench", "dry_run": True}, tmp_path)
    assert spec["kind"] == "bench" and spec["bench"] == "routerbench" and not errors
    _, _, errors = translate_skill_spec({"hello": 1}, tmp_path)
    assert errors and errors[0].startswith("body: not a spec file of the original skill")


@pytest.mark.slow
def test_post_runs_format_skill_translates_or_names_each_bad_path(
    service: Service, env: dict[str, str]
) -> None:
    _router_rows(Path(env["TRM_DATA_DIR"]) / "router.jsonl")
    spec = dict(TRAINING, router_dataset="router.jsonl", dry_run=True)
    ok = service.http.post(
        "/runs", params={"format": "skill"}, json=spec, headers={"Idempotency-Key": "skill-1"}
    )
    assert ok.status_code == 202, ok.text
    body = ok.json()
    assert body["kind"] == "train" and any("output_dir: ignored" in w for w in body["warnings"])
    bad = dict(spec, router_dataset="C:/projects/data/router.jsonl")
    bad["corpus_spec"] = "D:/corpus.json"
    refused = service.http.post("/runs", params={"format": "skill"}, json=bad)
    assert refused.status_code == 422
    fields = [d["field"] for d in refused.json()["error"]["details"]]
    assert fields[:2] == ["router_dataset", "corpus_spec"]
    assert "does not exist" in refused.json()["error"]["message"]
