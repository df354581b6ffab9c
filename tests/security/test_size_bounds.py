"""No request buys unbounded compute or memory: every size knob of a spec has
an upper bound (422 naming it), and once the corpus is known the worker refuses, before
training, a run whose step count is over TRM_MAX_STEPS or whose memory estimate is over what it
has free (`bad_input` with the figures). Real API, real worker, real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.conftest import Service

pytestmark = pytest.mark.parametrize("working_service", ["sqlite"], indirect=True)


@pytest.fixture
def service(working_service: Service) -> Service:
    """Every test here submits runs of its own and looks only at those: one API and one worker
    for all (`working_service`)."""
    return working_service


@pytest.fixture
def settings(working_service: Service) -> Settings:
    return working_service.settings


CORPUS = {"sources": [{"type": "jsonl", "name": "w", "path": "wide"}], "split": {"by": "row"}}


def train(trm: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"kind": "train", "trainer": "trm", "trm": trm, "corpus": CORPUS, **more}


def write_wide_corpus(settings: Settings) -> None:
    """3000 distinct rows of 40 candidates each: a router over 40 options, a plausible corpus."""
    folder = settings.data_dir / "wide"
    folder.mkdir(parents=True, exist_ok=True)  # the same rows for every test that asks
    tools = [f"opt{k}" for k in range(40)]
    with open(folder / "rows.jsonl", "w") as fh:
        for i in range(3000):
            state = {"load": i, "costs": {t: (i * (k + 1)) % 11 for k, t in enumerate(tools)}}
            row = {
                "state": state,
                "tools": tools,
                "action": tools[i % 40],
                "meta": {"env": f"e{i % 5}", "episode": str(i)},
            }
            fh.write(json.dumps(row) + "\n")


def stage(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in run["stages"] if s["name"] == name)


HOSTILE = [
    (train({"epochs": 10**12}), "trm.epochs"),  # was accepted: 2.3e13 steps
    (train({"hidden": 4096, "n_recursions": 64, "batch_size": 4096}), "trm.hidden"),
    (train({"checkpoint_every": 10**15}), "trm.checkpoint_every"),
    (train({}, trainer="qlora", qlora={"epochs": 10**9}), "qlora.epochs"),
    (train({}, trainer="qlora", qlora={"alpha": 10**9}), "qlora.alpha"),
    (train({}, seed=2**63 - 1), "seed"),
    (train({}, budget={"max_tokens": 10**30}), "budget.max_tokens"),
    ({"kind": "selftest", "steps": 10**12}, "steps"),
    (
        {
            "kind": "hillclimb",
            "base": train({}),
            "anchors": ["e0"],
            "trainer_knobs": {"hidden": [64, 4096]},
        },
        "trainer_knobs",
    ),
    ({"kind": "hillclimb", "base": train({}), "anchors": ["e0"], "patience": 10**9}, "patience"),
]


def test_every_size_knob_has_an_upper_bound_named_in_the_422(service: Service) -> None:
    for spec, field in HOSTILE:
        response = service.http.post("/runs", json=spec)
        assert response.status_code == 422, (field, response.text)
        error = response.json()["error"]
        named = [error["message"].split(":")[0], *(d["field"] for d in error["details"])]
        assert field in named, (field, response.text)


def test_a_run_too_large_for_memory_is_refused_before_training(
    service: Service, settings: Settings
) -> None:
    """hidden 1024 x 16 recursions x batch 4096 is within every bound, but on 40 candidates a
    row one micro-batch's activations are ~100 GiB: refused with the estimate, not attempted
    (before, the allocation failed and the run was retried and failed as `oom`)."""
    write_wide_corpus(settings)
    run = service.submit(train({"hidden": 1024, "n_recursions": 16, "batch_size": 4096}))
    done = service.wait_status(run["id"], "completed", "failed", timeout=240)
    assert (done["status"], done["failure_class"]) == ("failed", "bad_input"), done
    reason = done["failure_reason"]
    assert "would need about" in reason and "GiB" in reason, reason
    assert "trm.hidden" in reason and "available RAM" in reason, reason
    assert stage(done, "launch_trainer")["status"] == "failed"
    trainer = settings.runs_dir / run["id"] / "trainer"
    assert not (trainer / "checkpoints").exists()  # not one step was taken


def test_epochs_times_rows_over_max_steps_is_refused_with_the_figure(
    service: Service, settings: Settings
) -> None:
    """epochs 1000 is within its bound; at batch 1 on 2400 train rows it is 2.4 million steps,
    over TRM_MAX_STEPS (a million): `bad_input` naming the knobs and the count, at once."""
    write_wide_corpus(settings)
    run = service.submit(train({"epochs": 1000, "batch_size": 1, "hidden": 8}))
    done = service.wait_status(run["id"], "completed", "failed", timeout=240)
    assert (done["status"], done["failure_class"]) == ("failed", "bad_input"), done
    reason = done["failure_reason"]
    assert "trm.epochs=1000" in reason and "trm.batch_size=1" in reason, reason
    assert "TRM_MAX_STEPS" in reason and "1000000" in reason, reason
    steps = int(reason.split(" would train ")[1].split(" steps")[0])
    assert steps > 1_000_000


def test_a_demo_sized_run_trains_and_notes_its_estimate(
    service: Service, settings: Settings, route_corpus: Path
) -> None:
    data = settings.data_dir / "route"
    data.mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl"):
        (data / name).write_text((route_corpus / name).read_text())
    corpus = {"sources": [{"type": "jsonl", "name": "r", "path": "route"}]}
    spec = {"kind": "train", "trm": {"hidden": 16, "max_steps": 3}, "corpus": corpus}
    dry = service.submit({**spec, "dry_run": True})
    real = service.submit(spec)
    done = service.wait_status(real["id"], "completed", "failed", timeout=300)
    assert done["status"] == "completed", done
    notes = stage(done, "launch_trainer")["manifest"]["notes"]
    assert any(n.startswith("estimate: 3 steps (trm.max_steps=3); about") for n in notes), notes
    planned = service.wait_status(dry["id"], "completed", "failed")
    plan = stage(planned, "launch_trainer")["manifest"]["notes"][0]
    assert "would train a trm model: 3 steps (trm.max_steps=3)" in plan, plan
