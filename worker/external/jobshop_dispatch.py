"""Job-shop scheduling as dispatching: what a controller decides at each step, what it sees,
the classic rules, and a solved schedule replayed as labelled decisions.

**Schedule generation** (Giffler & Thompson's active scheme): at each step, of every job's next
operation take the one that could finish first (earliest start = max(job ready, machine free),
plus its duration; ties to the lower job); its machine is the step's machine, and the
candidates are the jobs whose next operation is on that machine and could start before that
finish (that operation's own job always among them). The chosen operation starts at its
earliest start. Every schedule built so is active, and every active schedule, an optimal one
among them, can be built so: the controller loses nothing by the scheme, and a rule or a model
only has to choose among the few jobs that really compete for the machine.

**State** of a step (`state`), one entry per candidate under `jobs`, keyed by the candidate's
id (`j3`: the encoder sets each candidate against its own entry); every time is measured from
`t`, the earliest start among the candidates, so a state reads the same at any point of the
schedule and on a larger instance:
- `jobs.<id>`: `dur` (this operation), `delay` (its earliest start - t), `end` (its earliest
  finish - t), `ready` (when the job got free - t: how long it waited when negative),
  `work_left` / `ops_left` (the job's work and operations left, this one included),
  `after` (the work left after this one), `finish` (earliest start + work left - t: the job's
  own bound on the makespan), `next_dur`, `next_wait` and `next_load` (the job's next
  operation, how long it would wait for its machine after this one ends, and that machine's
  work left: is the job headed for a bottleneck; 0 when this is the last), `bound_if` (the
  makespan's lower bound, as `bound`, once this operation is dispatched: the jobs queued on the
  machine then wait for its end; - t) and `delays` (how long the other candidates would wait
  for its end, summed): a choice's one-step look-ahead.
- `machine`: the step's machine, `load` (its work left), `idle` (t - when it got free),
  `queue` and `queue_work` (the jobs whose next operation is on it, and their durations).
- `bound` (the makespan's lower bound now: of every job, its ready time + work left, and of
  every machine, its free time + work left; - t), `window` (the first finish - t), `progress`
  (share of the operations dispatched).

**Rules** (each picks among the same candidates, ties to the lower job): SPT / LPT (shortest /
longest operation), MWKR / LWKR (most / least work left in the job), MOR / LOR (most / fewest
operations left), FIFO (the job that got ready first), random (uniform, seeded).

**Labels** (`replay`): a solved schedule is first made active (each operation, in start order,
moved to the earliest time its job and machine allow, until nothing moves; the makespan never
grows), then replayed by the scheme above; at each step the label is the candidate whose
operation the schedule starts earliest (ties to the lower job). Replayed in label order, the
scheme rebuilds that active schedule exactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from worker.external.jobshop_instances import Instance

Scheme = Literal["active", "non_delay"]
SCHEMES: tuple[Scheme, ...] = ("active", "non_delay")
_compact = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode


def job_id(job: int) -> str:
    return f"j{job}"


class Shop:
    """A partial schedule of one instance, extended one operation at a time."""

    def __init__(self, instance: Instance, scheme: Scheme = "active") -> None:
        self.instance, self.scheme = instance, scheme
        jobs = instance.jobs
        self.next = [0] * len(jobs)
        self.ready = [0] * len(jobs)
        self.free = [0] * instance.machines
        self.work_left = [sum(op.duration for op in job) for job in jobs]
        self.load = [0] * instance.machines
        for job in jobs:
            for op in job:
                self.load[op.machine] += op.duration
        self.starts: list[list[int]] = [[-1] * len(job) for job in jobs]
        self.done = 0
        self.total = instance.operations

    @property
    def finished(self) -> bool:
        return self.done == self.total

    @property
    def makespan(self) -> int:
        return max(self.ready, default=0)

    def earliest(self, job: int) -> int:
        op = self.instance.jobs[job][self.next[job]]
        return max(self.ready[job], self.free[op.machine])

    def candidates(self) -> tuple[int, list[int]]:
        """(the step's machine, the candidate jobs in job order) under the shop's scheme."""
        jobs = self.instance.jobs
        live = [j for j, k in enumerate(self.next) if k < len(jobs[j])]
        if not live:
            raise ValueError("every operation is dispatched")
        est = {j: self.earliest(j) for j in live}
        if self.scheme == "non_delay":
            first = min(live, key=lambda j: (est[j], j))
            start = est[first]
            machine = jobs[first][self.next[first]].machine
            on = [j for j in live if jobs[j][self.next[j]].machine == machine]
            return machine, [j for j in on if est[j] == start]
        first = min(live, key=lambda j: (est[j] + jobs[j][self.next[j]].duration, j))
        finish = est[first] + jobs[first][self.next[first]].duration
        machine = jobs[first][self.next[first]].machine
        on = [j for j in live if jobs[j][self.next[j]].machine == machine]
        return machine, [j for j in on if j == first or est[j] < finish]

    def dispatch(self, job: int) -> int:
        """Start the job's next operation at its earliest start; returns that start."""
        k = self.next[job]
        op = self.instance.jobs[job][k]
        start = self.earliest(job)
        self.starts[job][k] = start
        self.ready[job] = self.free[op.machine] = start + op.duration
        self.work_left[job] -= op.duration
        self.load[op.machine] -= op.duration
        self.next[job] += 1
        self.done += 1
        return start

    def state(self, machine: int, jobs: Sequence[int]) -> dict[str, Any]:
        """What a controller sees at this step (see the module docstring)."""
        instance = self.instance
        est = {j: self.earliest(j) for j in jobs}
        t = min(est.values())
        window = min(est[j] + instance.jobs[j][self.next[j]].duration for j in jobs) - t
        queued = [
            j
            for j, k in enumerate(self.next)
            if k < len(instance.jobs[j]) and instance.jobs[j][k].machine == machine
        ]
        job_bound = [r + w for r, w in zip(self.ready, self.work_left, strict=True)]
        machine_bound = [f + w for f, w in zip(self.free, self.load, strict=True)]
        entries: dict[str, Any] = {}
        for j in jobs:
            k = self.next[j]
            op = instance.jobs[j][k]
            end = est[j] + op.duration
            following = instance.jobs[j][k + 1] if k + 1 < len(instance.jobs[j]) else None
            entries[job_id(j)] = {
                "dur": op.duration,
                "delay": est[j] - t,
                "end": end - t,
                "ready": self.ready[j] - t,
                "work_left": self.work_left[j],
                "ops_left": len(instance.jobs[j]) - k,
                "after": self.work_left[j] - op.duration,
                "finish": est[j] + self.work_left[j] - t,
                "next_dur": following.duration if following else 0,
                "next_wait": max(0, self.free[following.machine] - end) if following else 0,
                "next_load": self.load[following.machine] if following else 0,
                "bound_if": self._bound_if(j, end, machine, queued, job_bound, machine_bound) - t,
                "delays": sum(max(0, end - est[k]) for k in jobs if k != j),
            }
        bound = max(
            max(r + w for r, w in zip(self.ready, self.work_left, strict=True)),
            max(f + w for f, w in zip(self.free, self.load, strict=True)),
        )
        return {
            "jobs": entries,
            "machine": {
                "load": self.load[machine],
                "idle": t - self.free[machine],
                "queue": len(queued),
                "queue_work": sum(instance.jobs[j][self.next[j]].duration for j in queued),
            },
            "bound": bound - t,
            "window": window,
            "progress": round(self.done / self.total, 4),
        }

    def _bound_if(
        self,
        job: int,
        end: int,
        machine: int,
        queued: list[int],
        job_bound: list[int],
        machine_bound: list[int],
    ) -> int:
        """The makespan's lower bound once `job` is dispatched to end at `end`: every job's
        ready time + work left (the jobs queued on the machine wait for it to get free), every
        machine's free time + work left."""
        dur = self.instance.jobs[job][self.next[job]].duration
        jobs = max((b for k, b in enumerate(job_bound) if k != job), default=0)
        waiting = max(
            (max(self.ready[k], end) + self.work_left[k] for k in queued if k != job), default=0
        )
        machines = max((b for m, b in enumerate(machine_bound) if m != machine), default=0)
        mine = end + self.work_left[job] - dur
        return max(jobs, waiting, machines, mine, end + self.load[machine] - dur)


# A rule: (shop, candidate jobs) -> the chosen job.
Rule = Callable[[Shop, list[int]], int]


def _by(key: Callable[[Shop, int], float]) -> Rule:
    return lambda shop, jobs: min(jobs, key=lambda j: (key(shop, j), j))


def _duration(shop: Shop, j: int) -> int:
    return shop.instance.jobs[j][shop.next[j]].duration


def _ops_left(shop: Shop, j: int) -> int:
    return len(shop.instance.jobs[j]) - shop.next[j]


RULES: dict[str, Rule] = {
    "SPT": _by(lambda s, j: _duration(s, j)),
    "LPT": _by(lambda s, j: -_duration(s, j)),
    "MWKR": _by(lambda s, j: -s.work_left[j]),
    "LWKR": _by(lambda s, j: s.work_left[j]),
    "MOR": _by(lambda s, j: -_ops_left(s, j)),
    "LOR": _by(lambda s, j: _ops_left(s, j)),
    "FIFO": _by(lambda s, j: s.ready[j]),
}


def random_rule(seed: int) -> Rule:
    rng = random.Random(seed)
    return lambda shop, jobs: rng.choice(jobs)


def run_rule(instance: Instance, rule: Rule, scheme: Scheme = "active") -> int:
    """The makespan the rule's dispatching reaches on the instance."""
    shop = Shop(instance, scheme)
    while not shop.finished:
        _, jobs = shop.candidates()
        shop.dispatch(rule(shop, jobs))
    return shop.makespan


def run_order(instance: Instance, order: Sequence[int], scheme: Scheme = "active") -> Shop:
    """Dispatch the jobs in the order given (each entry must be a candidate of its step)."""
    shop = Shop(instance, scheme)
    for j in order:
        _, jobs = shop.candidates()
        if j not in jobs:
            raise ValueError(f"job {j} is not a candidate at step {shop.done} ({jobs})")
        shop.dispatch(j)
    return shop


# Scores per candidate for a batch of (state JSON text, candidate ids): a policy's scores_batch.
Scorer = Callable[[Sequence[str], Sequence[list[str]]], list[list[float]]]


def run_policy(
    instances: Sequence[Instance], scores: Scorer, scheme: Scheme = "active"
) -> list[int]:
    """The makespans a policy reaches. All instances are dispatched in lockstep so that each
    step is one batched call; a step with one candidate is taken without asking (ties to the
    lower job, as the rules)."""
    shops = [Shop(instance, scheme) for instance in instances]
    while True:
        asks: list[tuple[Shop, int, list[int]]] = []
        for shop in shops:
            while not shop.finished:
                machine, jobs = shop.candidates()
                if len(jobs) > 1:
                    asks.append((shop, machine, jobs))
                    break
                shop.dispatch(jobs[0])
        if not asks:
            return [s.makespan for s in shops]
        texts = [_compact(s.state(machine, jobs)) for s, machine, jobs in asks]
        tools = [[job_id(j) for j in jobs] for _, _, jobs in asks]
        for (shop, _, jobs), row in zip(asks, scores(texts, tools), strict=True):
            best = max(range(len(jobs)), key=lambda i: (row[i], -i))
            shop.dispatch(jobs[best])


@dataclass(frozen=True)
class Decision:
    """One labelled step of a replayed schedule."""

    state: dict[str, Any]
    tools: list[str]
    action: str


def make_active(instance: Instance, starts: Sequence[Sequence[int]]) -> list[list[int]]:
    """The schedule with each operation, in start order, moved to the earliest time its job and
    its machine's earlier operations allow (into an idle gap when it fits), until nothing moves."""
    current = [list(row) for row in starts]
    while True:
        order = sorted(
            ((current[j][k], j, k) for j, job in enumerate(instance.jobs) for k in range(len(job)))
        )
        placed: dict[int, list[tuple[int, int]]] = {}
        moved = False
        new = [[0] * len(job) for job in instance.jobs]
        for _, j, k in order:
            op = instance.jobs[j][k]
            ready = new[j][k - 1] + instance.jobs[j][k - 1].duration if k else 0
            start = ready
            for s, e in sorted(placed.get(op.machine, [])):
                if start + op.duration <= s:
                    break
                start = max(start, e)
            placed.setdefault(op.machine, []).append((start, start + op.duration))
            new[j][k] = start
            moved |= start != current[j][k]
        if not moved:
            return new
        current = new


def replay(
    instance: Instance, starts: Sequence[Sequence[int]], scheme: Scheme = "active"
) -> tuple[list[Decision], Shop]:
    """A solved schedule as labelled dispatching steps (every step, one-candidate ones too),
    and the shop those labels build."""
    target = make_active(instance, starts)
    shop = Shop(instance, scheme)
    out = []
    while not shop.finished:
        machine, jobs = shop.candidates()
        label = min(jobs, key=lambda j: (target[j][shop.next[j]], j))
        out.append(Decision(shop.state(machine, jobs), [job_id(j) for j in jobs], job_id(label)))
        shop.dispatch(label)
    return out, shop


def state_text(state: dict[str, Any]) -> str:
    return _compact(state)
