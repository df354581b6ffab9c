"""The `jobshop` corpus source: instance files solved by CP-SAT, each schedule replayed as
labelled dispatching decisions (worker/external/jobshop_dispatch.py).

- **Files**: every `*.txt` / `*.jss` of the source's folder (or the one file), Taillard or
  OR-Library text; a malformed one fails the build naming the file and line. With `generate`,
  the folder is created and `gen-<seed>-<i>.txt` written first (sizes drawn per instance from
  the ranges, seeded); files already there are kept.
- **Solutions**: CP-SAT, one worker, `solve_seconds` of deterministic time (so the same file
  gives the same schedule on any machine), with a wall-clock cap of twice that: on a loaded
  machine the cap can stop a search first, and that schedule depends on the machine's speed
  (measured here: two cores shared, 1.5 deterministic seconds took the whole 3 s cap on most
  instances above 10 x 10). The cache below keeps a folder's schedules fixed once solved.
  Each is cached as `<folder>/solutions/<file stem>.json` with the instance's hash, the limit,
  the makespan and whether it was proven optimal; a cache that does not match is solved
  again. A folder that cannot be written is solved every time.
- **Rows**: one per decision with two or more candidates (a lone candidate is no decision:
  the rollout takes it without asking the policy): state, tools (`j<job>`), action (the
  candidate the schedule starts earliest). env = run = episode = the instance's name (so a
  split by env holds whole instances out), family `jobshop`; meta carries the step, the solved
  makespan and `optimal`.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from core.schemas.sources import JobShopSource
from worker.corpus.errors import CorpusInputError
from worker.corpus.rows import Row, Tally
from worker.external.jobshop_dispatch import Decision, replay, state_text
from worker.external.jobshop_instances import (
    Instance,
    InstanceFileError,
    Solved,
    generate,
    read_instance,
    solve,
)

MAX_INSTANCES = 1000
SUFFIXES = (".txt", ".jss")
SOLUTIONS = "solutions"


def files_of(source: JobShopSource, field: str) -> list[Path]:
    """The instance files the source reads (generated first when it says so); raises
    CorpusInputError naming the field for a missing path, and the file and line for a
    malformed file."""
    root = Path(source.path)
    if source.generate is not None:
        _write_generated(source, root, field)
    if not root.exists():
        raise CorpusInputError(field, f"{root} does not exist")
    if root.is_file():
        files = [root]
    else:
        files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise CorpusInputError(field, f"{root} holds no instance file ({', '.join(SUFFIXES)})")
    if len(files) > MAX_INSTANCES:
        raise CorpusInputError(
            field, f"{root} holds {len(files)} instance files; at most {MAX_INSTANCES} are solved"
        )
    for path in files:
        try:
            read_instance(path)
        except InstanceFileError as bad:
            raise CorpusInputError(field, str(bad)) from None
    return files


def _write_generated(source: JobShopSource, root: Path, field: str) -> None:
    knobs = source.generate
    assert knobs is not None
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as bad:
        raise CorpusInputError(field, f"cannot create {root} ({bad})") from None
    rng = random.Random(f"jobshop-sizes/{knobs.seed}")
    for i in range(knobs.count):
        jobs = rng.randint(*knobs.jobs)
        machines = rng.randint(*knobs.machines)
        name = f"gen-{knobs.seed}-{i:04d}"
        path = root / f"{name}.txt"
        if not path.exists():
            instance = generate(name, knobs.seed, jobs, machines, knobs.durations)
            path.write_text(instance.text())


def solved(instance: Instance, text: str, cache: Path | None, seconds: float) -> Solved:
    """CP-SAT's schedule of the instance, from the cache when it matches."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    if cache is not None and cache.is_file():
        try:
            data = json.loads(cache.read_text())
            if data["instance_sha256"] == digest and data["solve_seconds"] == seconds:
                starts = tuple(tuple(int(s) for s in row) for row in data["starts"])
                return Solved(
                    starts, int(data["makespan"]), bool(data["optimal"]), float(data["seconds"])
                )
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is solved again
    found = solve(instance, seconds)
    if cache is not None:
        record = {
            "instance_sha256": digest,
            "solve_seconds": seconds,
            "starts": found.starts,
            "makespan": found.makespan,
            "optimal": found.optimal,
            "seconds": round(found.seconds, 3),
        }
        try:
            cache.parent.mkdir(exist_ok=True)
            cache.write_text(json.dumps(record, separators=(",", ":")))
        except OSError:
            pass  # a read-only folder: solved again next time
    return found


def read_rows(source: JobShopSource, files: list[Path], tally: Tally, progress: Any) -> list[Row]:
    """Every decision row of every instance file (see the module docstring)."""
    root = Path(source.path)
    folder = root if root.is_dir() else root.parent
    rows: list[Row] = []
    for path in files:
        label = path.name
        tally.files.append(label)
        text = path.read_text(encoding="utf-8")
        instance = read_instance(path)
        found = solved(
            instance, text, folder / SOLUTIONS / f"{path.stem}.json", source.solve_seconds
        )
        decisions, _ = replay(instance, found.starts, source.scheme)
        for step, decision in enumerate(decisions):
            if len(decision.tools) < 2:
                continue
            tally.rows_read += 1
            rows.append(_decision_row(source, label, instance.name, step, decision, found))
        progress(path.stat().st_size)
    return rows


def _decision_row(
    source: JobShopSource, label: str, env: str, step: int, decision: Decision, found: Solved
) -> Row:
    """One dispatching step of the instance `env` (file `label`) as a Row; its meta says the
    step and the solved schedule's makespan."""
    meta = {
        "source_name": source.name,
        "source_type": source.type,
        "env": env,
        "run": env,
        "path": label,
        "line": step,
        "episode": env,
        "family": "jobshop",
        "step": step,
        "solved_makespan": found.makespan,
        "optimal": found.optimal,
    }
    return Row(
        state_text(decision.state),
        decision.state,
        decision.tools,
        decision.action,
        meta,
        source.name,
        env,
        env,
        env,
        "jobshop",
        False,
        False,
    )
