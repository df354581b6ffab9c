"""`schedule`: place jobs, one per turn in queue order, onto machine time slots under constraints.

A job has a duration, a release time, a deadline, the machines it may run on and the jobs it must
follow. A candidate is (machine, start). Invalid: past the horizon or the deadline, before the
release or a predecessor's end, on an ineligible machine, over a busy or maintenance slot. Dead end:
a valid placement after which the jobs still queued cannot all be placed (exact, by search). Each
episode's jobs come from a hidden feasible schedule, so a solution always exists; the oracle takes
the earliest start that keeps one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from worker.envs.base import World, pick_style, seeded_rng

MACHINE_NAMES = [
    ["m0", "m1", "m2"],
    ["lathe", "mill", "press"],
    ["cpu0", "cpu1", "cpu2"],
    ["lineA", "lineB", "lineC"],
    ["oven", "kiln", "dryer"],
]
# How each world spells "put the current job on machine m at time t".
STYLES = [
    {"slot": "{m}@t{t}"},
    {"slot": "{m}:{t}"},
    {"slot": "slot_{m}_{t}"},
    {"slot": "T{t}.{m}"},
    {"slot": "start({m},{t})"},
]
JOB_NAMES = ["J{i}", "task_{a}", "build-{i}", "op{i}"]


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    duration: int
    release: int
    deadline: int
    machines: tuple[int, ...]
    after: tuple[int, ...]  # indexes of earlier jobs that must end before this one starts


@dataclass(frozen=True, slots=True)
class ScheduleState:
    jobs: tuple[Job, ...]
    busy: tuple[int, ...]  # bitmask of occupied slots per machine (maintenance included)
    ends: tuple[int, ...]  # end time of each placed job, in queue order
    placed: tuple[tuple[int, int], ...]  # (machine, start) of each placed job


class ScheduleWorld(World):
    family = "schedule"

    def __init__(
        self,
        world_id: str,
        *,
        machines: list[str],
        horizon: int,
        maintenance: list[int],
        jobs_per_episode: tuple[int, int],
        deadline_slack: int,
        precedence: float,
        job_names: str,
        style: dict[str, str],
    ):
        self.machines, self.horizon, self.maintenance = machines, horizon, maintenance
        self.jobs_per_episode, self.deadline_slack = jobs_per_episode, deadline_slack
        self.precedence, self.job_names = precedence, job_names
        self._slot: dict[str, tuple[int, int]] = {}
        tags: dict[str, str] = {}
        for t in range(horizon):
            for m, name in enumerate(machines):
                action = style["slot"].format(m=name, t=t)
                self._slot[action] = (m, t)
                tags[action] = f"place:{name}@t{t}"
        params = {
            "machines": machines,
            "horizon": horizon,
            "maintenance_masks": maintenance,
            "jobs_per_episode": list(jobs_per_episode),
            "deadline_slack": deadline_slack,
            "precedence": precedence,
        }
        super().__init__(world_id, tags, params)
        self._solvable: dict[tuple[Any, ...], bool] = {}

    @classmethod
    def generate(cls, world_id: str, rng: random.Random) -> ScheduleWorld:
        n_machines = rng.randint(1, 3)
        horizon = rng.randint(6, 10)
        names = rng.choice(MACHINE_NAMES)[:n_machines]
        maintenance = []
        for _ in range(n_machines):
            mask = 0
            for _ in range(rng.randint(0, 2)):
                mask |= 1 << rng.randrange(horizon)
            maintenance.append(mask)
        low = rng.randint(3, 4)
        return cls(
            world_id,
            machines=names,
            horizon=horizon,
            maintenance=maintenance,
            jobs_per_episode=(low, rng.randint(low, 5)),
            deadline_slack=rng.randint(0, 3),
            precedence=rng.choice([0.0, 0.3, 0.6]),
            job_names=rng.choice(JOB_NAMES),
            style=pick_style(rng, STYLES),
        )

    def reset(self, episode: int | str) -> ScheduleState:
        """Jobs read off a random feasible schedule, so at least that schedule solves them."""
        rng = seeded_rng(self.world_id, "episode", episode)
        busy = list(self.maintenance)
        hidden: list[tuple[int, int, int]] = []  # (machine, start, end)
        jobs: list[Job] = []
        count = rng.randint(*self.jobs_per_episode)
        for i in range(count):
            options: list[tuple[int, int]] = []
            duration = rng.randint(1, 3) + 1
            while not options and duration > 1:
                duration -= 1
                options = [
                    (m, t)
                    for m in range(len(self.machines))
                    for t in range(self.horizon - duration + 1)
                    if not busy[m] & ((1 << duration) - 1) << t
                ]
            if not options:
                break
            m, t = rng.choice(options)
            busy[m] |= ((1 << duration) - 1) << t
            end = t + duration
            others = [k for k in range(len(self.machines)) if k != m and rng.random() < 0.5]
            after = tuple(
                k
                for k, (_m, _s, e) in enumerate(hidden)
                if e <= t and rng.random() < self.precedence
            )
            jobs.append(
                Job(
                    name=self.job_names.format(i=i + 1, a="abcdefgh"[i]),
                    duration=duration,
                    release=rng.randint(0, t),
                    deadline=min(self.horizon, end + rng.randint(0, self.deadline_slack)),
                    machines=tuple(sorted([m, *others])),
                    after=after,
                )
            )
            hidden.append((m, t, end))
        return ScheduleState(tuple(jobs), tuple(self.maintenance), (), ())

    def candidates(self, state: ScheduleState) -> list[str]:
        return list(self.action_tags)

    def why_invalid(self, state: ScheduleState, action: str) -> str | None:
        m, t = self._slot[action]
        job = state.jobs[len(state.placed)]
        end = t + job.duration
        if end > self.horizon:
            return "runs past the horizon"
        if m not in job.machines:
            return "machine not eligible"
        if t < job.release:
            return "before release"
        if end > job.deadline:
            return "misses the deadline"
        for k in job.after:
            if state.ends[k] > t:
                return f"before {state.jobs[k].name} ends"
        mask = ((1 << job.duration) - 1) << t
        if self.maintenance[m] & mask:
            return "maintenance"
        if state.busy[m] & mask:
            return "slot taken"
        return None

    def transition(self, state: ScheduleState, action: str) -> ScheduleState:
        m, t = self._slot[action]
        job = state.jobs[len(state.placed)]
        busy = list(state.busy)
        busy[m] |= ((1 << job.duration) - 1) << t
        return ScheduleState(
            state.jobs, tuple(busy), (*state.ends, t + job.duration), (*state.placed, (m, t))
        )

    def step_cost(self, state: ScheduleState, action: str) -> float:
        return float(self._slot[action][1])

    def cost_to_go(self, state: ScheduleState) -> float | None:
        return 0.0 if self._can_finish(state) else None

    def is_success(self, state: ScheduleState) -> bool:
        return len(state.placed) == len(state.jobs)

    def observe(self, state: ScheduleState) -> dict[str, Any]:
        i = len(state.placed)
        return {
            "job": self._job_view(state.jobs[i], state.jobs) if i < len(state.jobs) else None,
            "queued": [self._job_view(job, state.jobs) for job in state.jobs[i + 1 :]],
            "busy": {
                name: "".join(
                    "m" if self.maintenance[m] >> t & 1 else "#" if mask >> t & 1 else "."
                    for t in range(self.horizon)
                )
                for m, (name, mask) in enumerate(zip(self.machines, state.busy, strict=True))
            },
            "done": {state.jobs[k].name: end for k, end in enumerate(state.ends)},
        }

    def describe(self, state: ScheduleState) -> dict[str, Any]:
        view = self.observe(state)
        return {
            "jobs": [self._job_view(job, state.jobs) for job in state.jobs],
            "busy": view["busy"],
        }

    def _can_finish(self, state: ScheduleState) -> bool:
        """Depth-first search over placements of the queued jobs, memoized on the state."""
        if len(state.placed) == len(state.jobs):
            return True
        key = (state.jobs, state.busy, state.ends)
        known = self._solvable.get(key)
        if known is not None:
            return known
        found = any(
            self._can_finish(self.transition(state, action))
            for action in self.action_tags
            if self.why_invalid(state, action) is None
        )
        if len(self._solvable) > 500_000:
            self._solvable.clear()
        self._solvable[key] = found
        return found

    def _job_view(self, job: Job, jobs: tuple[Job, ...]) -> dict[str, Any]:
        return {
            "name": job.name,
            "dur": job.duration,
            "release": job.release,
            "deadline": job.deadline,
            "machines": [self.machines[m] for m in job.machines],
            "after": [jobs[k].name for k in job.after],
        }
