"""Putting runs on the arq queues (SPEC §11). The same call serves the API and the reconciler."""

from __future__ import annotations

from arq.connections import ArqRedis, RedisSettings, create_pool

from app.redisconn import redis_url
from app.settings import Settings

JOB_FUNCTION = "run_job"
QUEUES = ("gpu", "cpu")


def arq_redis_settings(settings: Settings) -> RedisSettings:
    rs = RedisSettings.from_dsn(redis_url(settings))
    rs.conn_timeout = 2
    rs.conn_retries = 2
    return rs


async def create_arq_pool(settings: Settings) -> ArqRedis:
    return await create_pool(arq_redis_settings(settings))


def job_id(settings: Settings, run_id: str, attempt: int) -> str:
    # One arq job per attempt: a stale job of an earlier attempt finds the run moved on and exits.
    return f"{settings.redis_namespace}:{run_id}:{attempt}"


async def enqueue(
    pool: ArqRedis, settings: Settings, run_id: str, attempt: int, queue: str
) -> bool:
    """True when a job was queued; False when arq already holds this attempt's job."""
    job = await pool.enqueue_job(
        JOB_FUNCTION,
        run_id,
        attempt,
        _job_id=job_id(settings, run_id, attempt),
        _queue_name=settings.queue_name(queue),
    )
    return job is not None
