"""SSE replay benchmark: one stream of a run with N stored events, from 0.

  paged replay (app/routes/events.py now:     vs  whole load (the replay as it was: every stored
  one page of events in memory at a time)         event read into a list, then the first sent)

Both read the same run in the same database, each in a fresh process of its own, and report the
time to the first frame, the time to the last, and the process's RSS growth (peak over the
replay, sampled every 2 ms). The paged replay is also measured as a client sees it: a real API
(uvicorn) streaming to an HTTP client, with the API process's RSS growth.

Usage: .venv/bin/python bench/sse_replay.py [--events 300000] [--size 600] [--db sqlite]
       [--out bench/out/sse_replay.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.db import make_engine  # noqa: E402
from core.models import Event, Run, utcnow  # noqa: E402

EVENTS: sa.Table = Event.__table__  # type: ignore[attr-defined]
RUNS: sa.Table = Run.__table__  # type: ignore[attr-defined]


def store_events(database_url: str, run_id: str, count: int, size: int = 600) -> None:
    """`count` log events of about `size` bytes each after the run's stored ones, then its
    terminal `completed` status, written straight to the database in bulk (a setup, not the
    publisher's path: nothing goes to Redis or events.jsonl). The run ends `completed`."""
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            first = conn.execute(
                sa.select(RUNS.c.event_seq).where(RUNS.c.id == run_id)
            ).scalar_one()
        now, filler = utcnow(), "x" * size
        for start in range(0, count + 1, 5000):
            rows = []
            for k in range(start, min(start + 5000, count + 1)):
                if k == count:
                    data: dict[str, Any] = {"status": "completed", "terminal": True}
                    kind = "status"
                else:
                    data, kind = {"message": filler, "i": k}, "log"
                row = {"run_id": run_id, "seq": first + 1 + k, "type": kind, "data": data}
                rows.append({**row, "created_at": now})
            with engine.begin() as conn:
                conn.execute(EVENTS.insert(), rows)
        with engine.begin() as conn:
            conn.execute(
                RUNS.update()
                .where(RUNS.c.id == run_id)
                .values(event_seq=first + 1 + count, status="completed", finished_at=now)
            )
    finally:
        engine.dispose()


class PeakRss:
    """The peak RSS of `pids` (summed) while it runs, sampled every 2 ms in a thread."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.start = self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> int:
        return sum(p.memory_info().rss for p in self.procs)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.002)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())

    @property
    def growth(self) -> int:
        return self.peak - self.start


# ---- the two replays, in a process of their own ----------------------------------------------
def whole_load(engine: sa.Engine, run_id: str) -> Iterator[bytes]:
    """The replay before bounded streams (the old `_read` in app/routes/events.py): every
    stored event after 0 into one list, 1000 rows per query, and only then the first frame."""
    from sqlmodel import Session, col, select

    from app.live import sse_frame
    from core.events import event_dict

    out: list[dict[str, Any]] = []
    after = 0
    with Session(engine) as db:
        while True:
            page = [
                event_dict(ev)
                for ev in db.exec(
                    select(Event)
                    .where(Event.run_id == run_id, col(Event.id) > after)
                    .order_by(col(Event.id))
                    .limit(1000)
                ).all()
            ]
            out.extend(page)
            if len(page) < 1000:
                break
            after = page[-1]["id"]
    for ev in out:
        yield sse_frame(ev)


def paged(engine: sa.Engine, run_id: str) -> Iterator[bytes]:
    """The route's own page reader (`_page`), a page at a time, as `follow` replays."""
    from app.live import sse_frame
    from app.routes.events import PAGE, _page

    app, last = SimpleNamespace(engine=engine), 0
    while True:
        page, _ = _page(app, run_id, last)  # type: ignore[arg-type]
        for ev in page:
            yield sse_frame(ev)
            last = ev["seq"]
        if len(page) < PAGE:
            return


def measure_in_process(mode: str, database_url: str, run_id: str) -> dict[str, Any]:
    replay: Callable[[sa.Engine, str], Iterator[bytes]] = {"whole": whole_load, "paged": paged}[
        mode
    ]
    import app.routes.events  # noqa: F401  (imports are not the replay's cost, nor is the
    import core.events  # noqa: F401  pool's first connection)

    engine = make_engine(database_url)
    with engine.connect():
        pass
    frames, first = 0, None
    started = time.perf_counter()
    with PeakRss([psutil.Process().pid]) as rss:
        for _frame in replay(engine, run_id):
            if first is None:
                first = time.perf_counter() - started
            frames += 1
    engine.dispose()
    return {
        "first_s": first,
        "all_s": time.perf_counter() - started,
        "rss_growth": rss.growth,
        "frames": frames,
    }


def in_subprocess(mode: str, database_url: str, run_id: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", mode, database_url, run_id],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def measure_http(url: str, api_pid: int, run_id: str) -> dict[str, Any]:
    """One client reading the whole stream from the real API."""
    pids = [api_pid, *(c.pid for c in psutil.Process(api_pid).children(recursive=True))]
    frames, first = 0, None
    started = time.perf_counter()
    with (
        PeakRss(pids) as rss,
        httpx.Client(base_url=url, timeout=600) as client,
        client.stream("GET", f"/runs/{run_id}/events") as response,
    ):
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("id:"):
                if first is None:
                    first = time.perf_counter() - started
                frames += 1
    return {
        "first_s": first,
        "all_s": time.perf_counter() - started,
        "rss_growth": rss.growth,
        "frames": frames,
    }


def main() -> None:
    from tests.stack import Scratch, Stack, create_database

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=600, help="bytes of each log event's text")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sse-replay-") as tmp:
        folder = Path(tmp)
        scratch = Scratch(folder, create_database(args.db, folder), prefix="b")
        scratch.migrate()
        stack = Stack({**scratch.env, "TRM_LOG_LEVEL": "WARNING"}, folder / "logs")
        try:
            api = stack.start_api()
            made = httpx.post(f"{stack.url}/runs", json={"kind": "selftest"}, timeout=30)
            made.raise_for_status()
            run_id = made.json()["id"]
            began = time.perf_counter()
            store_events(scratch.database_url, run_id, args.events, args.size)
            print(f"stored {args.events} events in {time.perf_counter() - began:.1f} s", flush=True)
            whole = in_subprocess("whole", scratch.database_url, run_id)
            page = in_subprocess("paged", scratch.database_url, run_id)
            http = measure_http(stack.url, api.pid, run_id)
        finally:
            stack.stop()
            scratch.drop()

    mib = 1024 * 1024
    print(f"\nSSE replay of one run with {args.events} events (~{args.size} B each), {args.db}")
    print(f"{'':28} {'whole load':>12} {'paged':>12} {'ratio':>8}   {'paged, HTTP':>12}")
    for key, label, unit in (
        ("first_s", "time to first event (s)", 1.0),
        ("all_s", "time to last event (s)", 1.0),
        ("rss_growth", "RSS growth (MiB)", mib),
    ):
        w, p, h = whole[key] / unit, page[key] / unit, http[key] / unit
        ratio = f"{w / p:.1f}x" if p > 0 else "-"
        print(f"{label:28} {w:12.3f} {p:12.3f} {ratio:>8}   {h:12.3f}")
    frames = {whole["frames"], page["frames"], http["frames"]}
    print(f"frames per stream: {sorted(frames)} (every stored event, once)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "events": args.events,
            "size": args.size,
            "db": args.db,
            "whole_load": whole,
            "paged": page,
            "paged_http": http,
        }
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--measure":
        print(json.dumps(measure_in_process(sys.argv[2], sys.argv[3], sys.argv[4])))
    else:
        main()
