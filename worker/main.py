"""The arq worker (SPEC §11): job functions and hooks. `trm worker --queues gpu,cpu` serves both
queues from one process; `arq worker.main.WorkerSettings` serves the gpu queue alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

from arq import Worker

from core.db import check_migrated, get_engine, session_scope
from core.events import Publisher
from core.models import WorkerRecord, utcnow
from core.queue import (
    SERIALIZERS,
    arq_redis_settings,
    create_arq_pool,
    job_deserializer,
    job_serializer,
)
from core.redisconn import async_redis, sync_redis
from core.settings import Settings, get_settings
from worker.gpuinfo import detect_gpu
from worker.reconciler import reconcile_once
from worker.runner import Runner

log = logging.getLogger("trm.worker")
SHUTDOWN_GRACE_S = 15.0
QUEUE_SLOTS = {"gpu": 1, "cpu": 4}  # one GPU job per worker; cpu jobs are light or waiting
# The runner stops an attempt at TRM_JOB_TIMEOUT_S itself (the run fails `timeout`); arq's own
# timeout comes this much later, once the stage process has had its grace and the end is written.
ARQ_TIMEOUT_SLACK_S = 60


def arq_job_timeout(settings: Settings) -> float:
    return settings.job_timeout_s + settings.cancel_grace_s + ARQ_TIMEOUT_SLACK_S


async def run_job(ctx: dict[str, Any], run_id: str, attempt: int) -> str:
    runner: Runner = ctx["runner"]
    attempt_done = asyncio.ensure_future(asyncio.to_thread(runner.execute, run_id, attempt))
    try:
        return await asyncio.shield(attempt_done)
    except asyncio.CancelledError:
        # arq's timeout (or an abort) cancels this coroutine, never the thread running the
        # attempt: stop the attempt's stage and hold the slot until it has ended, or the worker
        # would start a second run beside a stage process that is still going.
        runner.expire(run_id)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(attempt_done)
        raise


def lower_priority(nice: int) -> None:
    """Take CPU priority `nice` unless already lower (never raises it). On Linux a priority belongs
    to one thread, so every thread already running (a library's, the event loop's executor) is
    lowered too; threads and children started afterwards inherit it."""
    tasks = Path("/proc/self/task")
    threads = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for thread in threads:
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            if nice > os.getpriority(os.PRIO_PROCESS, thread):
                os.setpriority(os.PRIO_PROCESS, thread, nice)


async def startup(ctx: dict[str, Any]) -> None:
    if "runner" in ctx:
        return
    settings: Settings = ctx.get("settings") or get_settings()
    lower_priority(settings.worker_nice)
    engine = get_engine(settings)
    check_migrated(engine)
    worker_id = settings.worker_id or f"{socket.gethostname()}:{os.getpid()}"
    publisher = Publisher(engine, sync_redis(settings), settings, retry_s=settings.db_retry_s)
    ctx.update(
        settings=settings,
        publisher=publisher,
        worker_id=worker_id,
        runner=Runner(settings, publisher, worker_id),
    )
    with session_scope(engine) as session:
        record = session.get(WorkerRecord, worker_id) or WorkerRecord(
            id=worker_id, host=socket.gethostname(), pid=os.getpid(), queues=[]
        )
        record.queues, record.heartbeat_at = list(ctx.get("queues", ["gpu"])), utcnow()
        gpu = detect_gpu()
        record.gpu_name = gpu.name if gpu else None
        record.gpu_memory_bytes = gpu.memory_bytes if gpu else None
        session.add(record)
    ctx["pool"] = await create_arq_pool(settings)
    ctx["background"] = asyncio.create_task(_background(ctx))


async def shutdown(ctx: dict[str, Any]) -> None:
    task = ctx.pop("background", None)
    if task:
        task.cancel()
    if "pool" in ctx:
        await ctx.pop("pool").close()
    with session_scope(ctx["publisher"].engine) as session:
        record = session.get(WorkerRecord, ctx["worker_id"])
        if record:
            session.delete(record)


async def _background(ctx: dict[str, Any]) -> None:
    """Reconcile now and every few seconds; keep this worker's registry row fresh."""
    settings: Settings = ctx["settings"]
    blind_until = 0.0  # after a failed pass, heartbeats written meanwhile may not be visible yet
    while True:
        try:
            judge = asyncio.get_running_loop().time() >= blind_until
            await reconcile_once(settings, ctx["publisher"], ctx["pool"], judge_stale=judge)
            await asyncio.to_thread(_beat, ctx)
        except Exception as exc:  # the database or Redis is down: try again next round
            log.warning("reconcile pass failed: %s", exc)
            blind_until = asyncio.get_running_loop().time() + settings.stale_after_s
        await asyncio.sleep(settings.reconcile_every_s)


def _beat(ctx: dict[str, Any]) -> None:
    with session_scope(ctx["publisher"].engine) as session:
        record = session.get(WorkerRecord, ctx["worker_id"])
        if record:
            record.heartbeat_at = utcnow()
            session.add(record)


class WakeableWorker(Worker):
    """arq's Worker, woken by enqueues (`core/queue.py` publishes on the queue's wake channel)
    instead of polling Redis every few milliseconds: after each look at its queue it waits for a
    wake-up, one of its own jobs finishing (a slot is free) or `idle_poll_s`, whichever is first.
    An idle worker costs Redis two commands a second instead of hundreds, and a training run on
    the same host loses no CPU to it."""

    def __init__(self, *args: Any, idle_poll_s: float, **kwargs: Any) -> None:
        super().__init__(*args, poll_delay=0, **kwargs)
        self.idle_poll_s, self.wake = idle_poll_s, asyncio.Event()
        self._watched: set[str] = set()

    async def _poll_iteration(self) -> None:
        await super()._poll_iteration()
        for job_id in self.tasks.keys() - self._watched:  # jobs started by this look
            self.tasks[job_id].add_done_callback(lambda _task: self.wake.set())
        self._watched = set(self.tasks)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), self.idle_poll_s)
        self.wake.clear()


async def _listen_for_wakeups(settings: Settings, workers: dict[str, WakeableWorker]) -> None:
    """Wake the worker of a queue on every publish to its wake channel. While Redis is away the
    workers fall back to polling every `poll_delay_s`; on reconnecting all of them look once."""
    by_channel = {settings.wake_channel(queue): w for queue, w in workers.items()}
    while True:
        client = async_redis(settings)
        try:
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            await pubsub.subscribe(*by_channel)
            for worker in by_channel.values():
                worker.wake.set()  # an enqueue published while we were not listening
            async for message in pubsub.listen():
                woken = by_channel.get(message["channel"].decode())
                if woken is not None:
                    woken.wake.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("wake-ups lost Redis (%s); polling every %ss", exc, settings.poll_delay_s)
            await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()


async def _keep_polling(worker: Worker, stopping: asyncio.Event) -> None:
    """arq's poll loop ends at the first Redis error (a restart, a failover): poll again, or the
    queue would have no consumer while the worker still heartbeats as alive."""
    while not stopping.is_set():
        try:
            await worker.main()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("polling %s failed (%s); polling again in 1s", worker.queue_name, exc)
            await asyncio.sleep(1.0)


class WorkerSettings:
    functions = [run_job]
    on_startup = startup
    on_shutdown = shutdown
    queue_name = get_settings().queue_name("gpu")
    max_jobs = 1
    max_tries = 1
    keep_result = 0  # the database holds results; a stored one would block re-enqueueing
    job_timeout = arq_job_timeout(get_settings())
    job_serializer = staticmethod(job_serializer)
    job_deserializer = staticmethod(job_deserializer)
    poll_delay = 0.005  # this path has no wake-ups (`trm worker` has): poll often to start fast


async def serve(settings: Settings, queues: list[str]) -> None:
    """Run one arq Worker per queue in this process, sharing one runner and reconciler."""
    ctx: dict[str, Any] = {"settings": settings, "queues": queues}
    await startup(ctx)
    common: dict[str, Any] = {
        "functions": WorkerSettings.functions,
        "redis_settings": arq_redis_settings(settings),
        "max_tries": WorkerSettings.max_tries,
        "keep_result": WorkerSettings.keep_result,
        "job_timeout": arq_job_timeout(settings),
        "handle_signals": False,
        "ctx": ctx,
        **SERIALIZERS,
    }
    wakeable: dict[str, WakeableWorker] = {}
    workers: list[Worker] = []
    for queue in queues:
        name, slots = settings.queue_name(queue), QUEUE_SLOTS.get(queue, 1)
        if settings.wake_on_enqueue:
            wakeable[queue] = WakeableWorker(
                queue_name=name, max_jobs=slots, idle_poll_s=settings.poll_delay_s, **common
            )
            workers.append(wakeable[queue])
        else:
            workers.append(
                Worker(queue_name=name, max_jobs=slots, poll_delay=settings.poll_delay_s, **common)
            )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    mains = [asyncio.create_task(_keep_polling(w, stopping)) for w in workers]
    if wakeable:
        mains.append(asyncio.create_task(_listen_for_wakeups(settings, wakeable)))
    log.info("worker %s serving %s", ctx["worker_id"], ", ".join(queues))
    await stopping.wait()
    # Graceful: stop taking jobs, let running stages save and mark their runs interrupted.
    ctx["runner"].shutdown.set()
    for w in workers:
        w.allow_pick_jobs = False
    running = [t for w in workers for t in w.tasks.values() if not t.done()]
    if running:
        await asyncio.wait(running, timeout=SHUTDOWN_GRACE_S)
    for task in mains:
        task.cancel()
    for w in workers:
        await w.close()
    await shutdown(ctx)
