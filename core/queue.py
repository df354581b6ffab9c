"""Putting runs on the arq queues (SPEC §11). The same script serves the API, the reconciler and
the hill-climb launcher.

A job is what arq's `enqueue_job` writes (the pickled job under `arq:job:<id>`, its id scored by
enqueue time in the queue's sorted set), but written by one Lua script: one round trip instead of
arq's WATCH / EXISTS / MULTI / EXEC, and callable from a plain thread (the API's `POST /runs`
records and queues a run in one trip to the threadpool). Like `enqueue_job`, it refuses a job id
that is queued or already has a result. It also publishes the job id on the queue's wake channel,
so idle workers start it at once instead of polling Redis every few milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import expires_extra_ms, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job

from core.redisconn import redis_url
from core.settings import Settings

JOB_FUNCTION = "run_job"
QUEUES = ("gpu", "cpu")

ENQUEUE_LUA = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[4])
return 1
"""


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


def _job(settings: Settings, run_id: str, attempt: int, queue: str) -> tuple[list[str], list[Any]]:
    """The script's keys and arguments for this attempt's job."""
    jid = job_id(settings, run_id, attempt)
    now_ms = int(time.time() * 1000)
    payload = serialize_job(JOB_FUNCTION, (run_id, attempt), {}, None, now_ms)
    keys = [job_key_prefix + jid, result_key_prefix + jid, settings.queue_name(queue)]
    return keys, [expires_extra_ms, payload, now_ms, jid, settings.wake_channel(queue)]


def enqueue_now(
    client: redis.Redis, settings: Settings, run_id: str, attempt: int, queue: str
) -> bool:
    """From a thread: True when a job was queued; False when arq already holds this attempt's."""
    keys, args = _job(settings, run_id, attempt, queue)
    return bool(client.register_script(ENQUEUE_LUA)(keys, args))


def enqueue_many(client: redis.Redis, settings: Settings, jobs: list[tuple[str, int, str]]) -> int:
    """From a thread, (run id, attempt, queue) for each: one round trip for the lot (the API's
    group commit). How many were queued; the others' attempts were already held by arq."""
    if len(jobs) == 1:
        return int(enqueue_now(client, settings, *jobs[0]))
    script = client.register_script(ENQUEUE_LUA)
    pipe = client.pipeline(transaction=False)
    for run_id, attempt, queue in jobs:
        keys, args = _job(settings, run_id, attempt, queue)
        script(keys, args, client=pipe)
    return sum(bool(done) for done in pipe.execute())


async def enqueue(
    pool: ArqRedis, settings: Settings, run_id: str, attempt: int, queue: str
) -> bool:
    """From the event loop: the same as `enqueue_now`."""
    keys, args = _job(settings, run_id, attempt, queue)
    return bool(await pool.register_script(ENQUEUE_LUA)(keys, args))
