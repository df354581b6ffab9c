"""A run's directory, `RUNS_DIR/<run_id>/` (SPEC §3.1): every file in it named once, and the one
way a file there is written whole (a temp name in the same folder, flushed, then renamed, so a
reader never sees half a file and a crash leaves the old one or none).

The layout, by kind (SPEC §3.2):

    events.jsonl  summary.json  progress.snapshot.json       every run
    spec.resolved.json                                        dry runs of selftest
    <stage>/manifest.json  <stage>/child.log                  every stage
    corpus/ (train.jsonl val.jsonl anchor.jsonl critic.jsonl
             messages.jsonl messages_val.jsonl manifest.json)  train
    corpus.plan.json  trainer_config.resolved.json  trainer/  train
    trainer/ (model.safetensors config.json features.json | model.txt features.json |
              adapter/ run_meta.json; checkpoints/)
    scorecard.json  samples.jsonl                             train, bench
    bench.resolved.json                                       bench
    plan.json  hillclimb_ledger.jsonl  search_summary.json  candidates/<id>/  best/   hillclimb

Which stage writes which of them is `STAGE_OUTPUTS` below: the uploads route accepts a file from a
worker only as an output of the run's current stage.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

# Every run.
EVENTS = "events.jsonl"
SUMMARY = "summary.json"
SNAPSHOT = "progress.snapshot.json"
SPEC_RESOLVED = "spec.resolved.json"
MANIFEST = "manifest.json"  # <stage>/manifest.json
# A stage's child process (in its stage folder).
CHILD_PAYLOAD = ".child.json"
CHILD_OUTCOME = ".outcome.json"
CHILD_LOG = "child.log"
ARTIFACT_SYNC_STATE = ".artifact-sync.json"  # a worker's record of what it uploaded
# train
CORPUS = "corpus"
CORPUS_PLAN = "corpus.plan.json"
TRAINER_CONFIG = "trainer_config.resolved.json"
TRAINER = "trainer"
# In trainer/: a trm model, or a qlora adapter with its run record; checkpoints of both.
TRM_MODEL, TRM_CONFIG, TRM_VOCAB = "model.safetensors", "config.json", "vocab.json"
FEATURES = "features.json"  # the feature space a trm or gbdt model reads
TRM_BEST = "best.safetensors"  # in a trm checkpoint: the best val epoch's weights so far
GBDT_MODEL = "model.txt"  # LightGBM's own text format (never a pickle)
ADAPTER = "adapter"
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
# Beside the adapter: how long its training rows were cut (scoring cuts a prompt the same way).
ADAPTER_TRAINED = "trained_with.json"
RUN_META = "run_meta.json"
CHECKPOINTS = "checkpoints"  # checkpoints/step-NNNNNN/
CHECKPOINT_STATE = "trainer_state.json"  # optimizer, scheduler, RNG: all but the tensors
CHECKPOINT_TENSORS = "trainer_state.safetensors"  # their tensors (no pickle anywhere)
CHECKPOINT_META = "checkpoint.json"  # step, counters, fingerprint: written last
# train and bench
SCORECARD = "scorecard.json"
SAMPLES = "samples.jsonl"
# bench
BENCH_RESOLVED = "bench.resolved.json"
# hillclimb
LEDGER = "hillclimb_ledger.jsonl"
SEARCH_SUMMARY = "search_summary.json"
SEARCH_PLAN = "plan.json"
CANDIDATES = "candidates"
CANDIDATE_RESULT = "result.json"  # candidates/<id>/result.json
BEST = "best"
BEST_POINTER = "best.json"  # best/best.json: the best candidate's record and where its run is
# selftest (in its stage folders)
SELFTEST_PLAN, SELFTEST_CHECKPOINT, SELFTEST_RESULT = "plan.json", "checkpoint.json", "result.json"

# The corpus builder's files (in `corpus/`, or in `--out` of `trm corpus build`).
TRAIN_ROWS = "train.jsonl"
VAL_ROWS = "val.jsonl"
ANCHOR_ROWS = "anchor.jsonl"
CRITIC_ROWS = "critic.jsonl"
MESSAGES = "messages.jsonl"
MESSAGES_VAL = "messages_val.jsonl"

CHUNK = 1 << 20

# Uploads (app/routes/uploads.py, sent by worker/artifact_sync.py). What each stage of each kind
# writes in the run directory besides its own folder `<stage>/` (its manifest, child.log, files):
# the only paths the lease holder may upload while that stage is the run's current one. A name
# ending in "/" is that folder and everything under it.
STAGE_OUTPUTS: dict[str, dict[str, tuple[str, ...]]] = {
    "selftest": {"prepare": (), "loop": ()},
    "train": {
        "prepare_corpus": (f"{CORPUS}/",),
        "prepare_config": (TRAINER_CONFIG,),
        "launch_trainer": (f"{TRAINER}/",),
        "evaluate": (SCORECARD, SAMPLES),
    },
    "bench": {"resolve": (BENCH_RESOLVED,), "evaluate": (SCORECARD, SAMPLES)},
    "hillclimb": {
        "plan": (SEARCH_PLAN,),
        "search": (LEDGER, f"{CANDIDATES}/"),
        "finalize": (f"{CANDIDATES}/", f"{BEST}/", SEARCH_SUMMARY),
    },
}
# A dry run writes every stage's (planned) manifest and its kind's plan files instead.
DRY_RUN_OUTPUTS: dict[str, tuple[str, ...]] = {
    "selftest": (SPEC_RESOLVED,),
    "train": (CORPUS_PLAN, TRAINER_CONFIG),
    "bench": (BENCH_RESOLVED,),
    "hillclimb": (SEARCH_PLAN,),
}
# The runner's own record of an attempt, sent as the attempt ends (before its terminal status).
ATTEMPT_OUTPUTS = (SUMMARY,)
# Each host writes these for itself; no upload ever replaces them (nor any dot-file).
HOST_ONLY = frozenset({EVENTS, SNAPSHOT})
# The lease holder's credential, sent with each upload: its random key and its fencing token.
UPLOAD_KEY_HEADER = "X-Upload-Key"
LEASE_TOKEN_HEADER = "X-Lease-Token"


def stage_outputs(kind: str, stage: str) -> tuple[str, ...]:
    """The run-dir paths stage `stage` of a `kind` run writes: its folder, then the table's."""
    return (f"{stage}/", *STAGE_OUTPUTS.get(kind, {}).get(stage, ()))


def dry_run_outputs(kind: str) -> tuple[str, ...]:
    return (*(f"{s}/" for s in STAGE_OUTPUTS.get(kind, {})), *DRY_RUN_OUTPUTS.get(kind, ()))


def is_output(rel: str, outputs: tuple[str, ...]) -> bool:
    """`rel` (a normalized relative path) is one of `outputs` or lies in one of its folders."""
    return any(rel.startswith(o) if o.endswith("/") else rel == o for o in outputs)


def stage_dir(run_dir: Path, stage: str) -> Path:
    return run_dir / stage


def manifest_path(run_dir: Path, stage: str) -> Path:
    return run_dir / stage / MANIFEST


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "w", durable: bool = True) -> Iterator[IO[Any]]:
    """Open a temp file beside `path`; on a clean exit it is flushed (to disk too, unless not
    `durable`: a file rewritten many times a second that the next write replaces anyway) and
    renamed over `path`; on an error it is removed and `path` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    encoding = None if "b" in mode else "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_json_atomic(path: Path, data: Any, durable: bool = True) -> None:
    with atomic_file(path, durable=durable) as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=str)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_file(path, "wb") as fh:
        fh.write(data)


def folder_digest(folder: Path) -> str:
    """sha256 over a folder's file names and bytes (a checkpoint's identity)."""
    total = hashlib.sha256()
    for file in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        total.update(file.relative_to(folder).as_posix().encode() + b"\0")
        total.update(bytes.fromhex(sha256_file(file)))
    return total.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
