"""Usage of a run (SPEC §3.2a), accumulated over its attempts and recorded on the Run and in
summary.json: wall and device seconds, peak memory, and the work counters stages report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from worker.kinds.base import StageDef

WORK_COUNTERS = (
    "rows_trained",
    "tokens_trained",
    "examples_scored",
    "tokens_scored",
    "candidates_run",
)


@dataclass
class Usage:
    started: float  # this attempt's start (time.time())
    prior_wall: float = 0.0
    wall_seconds: float = 0.0
    device_seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int = 0
    peak_vram_bytes: int | None = None
    work: dict[str, float] = field(default_factory=dict)
    attempts: int = 1

    @classmethod
    def resume(cls, recorded: dict[str, Any] | None, started: float) -> Usage:
        rec = recorded or {}
        return cls(
            started=started,
            prior_wall=float(rec.get("wall_seconds", 0.0)),
            device_seconds=dict(rec.get("device_seconds", {})),
            peak_rss_bytes=int(rec.get("peak_rss_bytes", 0)),
            peak_vram_bytes=rec.get("peak_vram_bytes"),
            work={k: rec[k] for k in WORK_COUNTERS if k in rec},
            attempts=int(rec.get("attempts", 0)) + 1,
        )

    def deadline(self, max_seconds: float | None) -> float | None:
        return None if not max_seconds else self.started + max_seconds - self.prior_wall

    def add_stage(self, stage: StageDef, seconds: float, counters: dict[str, Any]) -> None:
        device = str(counters.get("device", "cpu")) if stage.in_child else "cpu"
        self.device_seconds[device] = self.device_seconds.get(device, 0.0) + seconds
        for key in WORK_COUNTERS:
            if isinstance(counters.get(key), int | float):
                self.work[key] = self.work.get(key, 0) + counters[key]
        if isinstance(counters.get("peak_vram_bytes"), int):
            self.peak_vram_bytes = max(self.peak_vram_bytes or 0, counters["peak_vram_bytes"])

    def finish(self, peak_rss: int) -> None:
        self.wall_seconds = self.prior_wall + (time.time() - self.started)
        self.peak_rss_bytes = max(self.peak_rss_bytes, peak_rss)

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_seconds": round(self.wall_seconds, 3),
            "device_seconds": {k: round(v, 3) for k, v in self.device_seconds.items()},
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_vram_bytes": self.peak_vram_bytes,
            **{k: self.work.get(k, 0) for k in WORK_COUNTERS},
            "attempts": self.attempts,
        }
