"""Checkpoints (worker/train/checkpoints.py, both trainers): a process killed (`kill -9`) in the
middle of writing one leaves the previous checkpoint to resume from, never half a folder; the
optimizer, scheduler and RNG come back as they were; old ones are pruned to the newest two."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from core.rundir import CHECKPOINT_META
from worker.context import StageFailure
from worker.train import checkpoints
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train as train_trm

ROOT = Path(__file__).resolve().parents[2]

# A real training process: one Linear, AdamW, a LambdaLR; step N saves checkpoint N. Its model
# part is written in two halves with a pause between them, so a kill can land mid-save.
SAVER = textwrap.dedent(
    """
    import sys, time, torch
    from pathlib import Path
    from worker.train import checkpoints

    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + s))

    def write(folder, step):
        torch.save(model.state_dict(), folder / "part1.pt")
        print(f"writing {step}", flush=True)
        time.sleep(0.3 if step == steps else 0)
        torch.save(model.state_dict(), folder / "part2.pt")

    for step in range(1, steps + 1):
        model(torch.randn(8, 64)).pow(2).mean().backward()
        optimizer.step(); scheduler.step(); optimizer.zero_grad()
        checkpoints.save(out, step, lambda f: write(f, step), optimizer, scheduler,
                         {"fingerprint": "f", "loss": step / 10})
    print("done", flush=True)
    time.sleep(60)
    """
)


def start_saver(out: Path, steps: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SAVER, str(out), str(steps)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    for got in proc.stdout:
        if got.strip() == line:
            return
    raise AssertionError(f"the saver exited before printing {line!r}")


def test_a_kill_in_the_middle_of_a_save_resumes_from_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    saver = start_saver(tmp_path, steps=4)
    wait_for_line(saver, "writing 4")  # checkpoint 4 is half written
    os.kill(saver.pid, signal.SIGKILL)
    saver.wait()

    root = tmp_path / checkpoints.CHECKPOINTS
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == [
        "step-000002",
        "step-000003",
    ]  # step 1 pruned (the newest two are kept); the half-written step 4 is not a checkpoint
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == [
        f".step-000004.tmp-{saver.pid}"
    ]

    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + s))
    newest = checkpoints.resume_point(tmp_path, "f")
    assert newest == root / "step-000003"
    meta = checkpoints.load(newest, optimizer, scheduler)
    assert meta["step"] == 3 and meta["loss"] == pytest.approx(0.3)
    assert {int(s["step"]) for s in optimizer.state.values()} == {3}  # Adam's step count
    assert scheduler.last_epoch == 3 and optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 / 4)

    # The next save from a live process clears the dead one's half-written folder.
    checkpoints.save(tmp_path, 4, lambda f: None, optimizer, scheduler, {"fingerprint": "f"})
    assert sorted(p.name for p in root.iterdir()) == ["step-000003", "step-000004"]


def test_the_rng_comes_back_so_a_resumed_run_draws_what_an_uninterrupted_one_would(
    tmp_path: Path,
) -> None:
    optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
    torch.manual_seed(7)
    checkpoints.save(tmp_path, 1, lambda f: None, optimizer, None, {"fingerprint": "f"})
    expected = torch.rand(5)
    torch.manual_seed(123)  # a fresh process would start from anything
    checkpoints.load(checkpoints.folder(tmp_path, 1), optimizer)
    assert torch.equal(torch.rand(5), expected)
    state = json.loads((checkpoints.folder(tmp_path, 1) / CHECKPOINT_META).read_text())
    assert state == {"fingerprint": "f", "step": 1}

    # The same step saved again (a stop right after a scheduled save) replaces it whole.
    checkpoints.save(tmp_path, 1, lambda f: None, optimizer, None, {"fingerprint": "g"})
    root = tmp_path / checkpoints.CHECKPOINTS
    assert [p.name for p in root.iterdir()] == ["step-000001"]
    assert checkpoints.resume_point(tmp_path, "g") == root / "step-000001"


def test_a_trm_checkpoint_from_another_config_is_refused(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = [
        {"state": json.dumps({"want": t}), "tools": ["a.x", "b.y"], "action": t}
        for t in ["a.x", "b.y"] * 20
    ]
    (corpus / "train.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    config = {"hidden": 16, "n_recursions": 2, "batch_size": 8, "max_steps": 4}

    class StopAfterOne(TrainerCallbacks):
        def should_stop(self) -> str | None:
            return "cancel" if self.steps else None

    train_trm(config, corpus, tmp_path / "out", StopAfterOne(), seed=0)
    with pytest.raises(StageFailure) as caught:
        train_trm({**config, "lr": 1e-2}, corpus, tmp_path / "out", TrainerCallbacks(), seed=0)
    assert caught.value.failure_class == "bad_input"
    assert "another config" in caught.value.reason
    # The OOM retry's change (half the batch, twice the accumulation) resumes fine.
    retry = {**config, "batch_size": 4, "grad_accum": 2}
    again = train_trm(retry, corpus, tmp_path / "out", TrainerCallbacks(), seed=0)
    assert again["resumed_from_step"] == 1 and again["steps"] == 4


class Planted:
    """Unpickling this touches `marker`: what a pickled checkpoint could do to a worker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_a_checkpoint_holds_no_pickle_and_a_planted_one_is_never_loaded(tmp_path: Path) -> None:
    import pickle

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    path = checkpoints.save(tmp_path, 1, lambda f: None, optimizer, None, {"fingerprint": "f"})
    names = sorted(p.name for p in path.iterdir())
    assert names == ["checkpoint.json", "trainer_state.json", "trainer_state.safetensors"]
    # The old pickle's name, with a payload, beside the state: loading never reads it.
    marker = tmp_path / "pwned"
    (path / "trainer_state.pt").write_bytes(pickle.dumps(Planted(marker)))
    fresh = torch.optim.AdamW(torch.nn.Linear(8, 8).parameters(), lr=1e-3)
    checkpoints.load(path, fresh)
    assert not marker.exists()
    saved, restored = optimizer.state_dict(), fresh.state_dict()
    assert restored["param_groups"][0]["lr"] == 1e-2
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(saved["state"][0][key], restored["state"][0][key])


def test_only_a_checkpoint_the_caller_trusts_is_resumed_from(tmp_path: Path) -> None:
    optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
    meta = {"fingerprint": "f"}
    ours = checkpoints.save(tmp_path, 1, lambda f: None, optimizer, None, meta)
    planted = checkpoints.save(tmp_path, 2, lambda f: None, optimizer, None, meta)
    assert checkpoints.resume_point(tmp_path, "f") == planted  # trusting everything: the newest
    assert checkpoints.resume_point(tmp_path, "f", lambda p: p == ours) == ours
    assert checkpoints.resume_point(tmp_path, "f", lambda p: False) is None
