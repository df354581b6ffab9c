"""Putting runs on the arq queues (SPEC §11). The same script serves the API, the reconciler and
the hill-climb launcher.

A job is what arq's `enqueue_job` writes (the job under `arq:job:<id>`, as JSON: arq's default
is a pickle, which would make write access to Redis code execution on every worker; its id scored by
enqueue time in the queue's sorted set), but written by one Lua script: one round trip instead of
arq's WATCH / EXISTS / MULTI / EXEC, and callable from a plain thread (the API's `POST /runs`
records and queues a run in one trip to the threadpool). Like `enqueue_job`, it refuses a job id
that is queued or already has a result. It also publishes the job id on the queue's wake channel,
so idle workers start it at once instead of polling Redis every few milliseconds.

A worker that starts a job first marks it `arq:in-progress:<id>` for the job timeout + 10 s (a
week), then claims the run in the database. One that dies in between leaves a marker no live
worker holds, and every worker passes over a marked job: `requeue_stale` clears such a marker
once it is older than any live worker takes to claim, and `drop_job` takes the jobs of runs that
moved on (finished, or on a later attempt) off the queue, so its depth counts no ghosts.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import (
    expires_extra_ms,
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
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


# A marker older than `min_age` whose run is still queued: no live worker holds it. The worker's
# retry counter goes too, or arq would count the dead worker's start as the job's one try.
REQUEUE_STALE_LUA = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 or tonumber(ARGV[1]) - ttl < tonumber(ARGV[2]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PSETEX', KEYS[3], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[6])
redis.call('PUBLISH', ARGV[7], ARGV[6])
return 1
"""

DROP_LUA = """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local gone = 0
for i = 4, #KEYS do gone = gone + redis.call('ZREM', KEYS[i], ARGV[1]) end
return gone
"""


def job_serializer(obj: Any) -> bytes:
    """arq's jobs and results as JSON (a run id and an attempt: nothing else crosses)."""
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def job_deserializer(data: bytes) -> Any:
    """JSON only: a pickle planted in Redis fails here as data, it never runs."""
    return json.loads(data)


SERIALIZERS: dict[str, Any] = {
    "job_serializer": job_serializer,
    "job_deserializer": job_deserializer,
}


def arq_redis_settings(settings: Settings) -> RedisSettings:
    rs = RedisSettings.from_dsn(redis_url(settings))
    rs.conn_timeout = 2
    rs.conn_retries = 2
    return rs


async def create_arq_pool(settings: Settings) -> ArqRedis:
    return await create_pool(arq_redis_settings(settings), **SERIALIZERS)


def job_id(settings: Settings, run_id: str, attempt: int) -> str:
    # One arq job per attempt: a stale job of an earlier attempt finds the run moved on and exits.
    return f"{settings.redis_namespace}:{run_id}:{attempt}"


def _job(settings: Settings, run_id: str, attempt: int, queue: str) -> tuple[list[str], list[Any]]:
    """The script's keys and arguments for this attempt's job."""
    jid = job_id(settings, run_id, attempt)
    now_ms = int(time.time() * 1000)
    payload = serialize_job(
        JOB_FUNCTION, (run_id, attempt), {}, None, now_ms, serializer=job_serializer
    )
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


def in_progress_ms(settings: Settings) -> int:
    """How long arq's worker marks a started job (its `in_progress_timeout_s`)."""
    return (settings.job_timeout_s + 10) * 1000


async def marked_jobs(pool: ArqRedis, settings: Settings) -> list[tuple[str, str, int]]:
    """(job id, run id, attempt) of each of this namespace's jobs a worker marked as started."""
    prefix = f"{in_progress_key_prefix}{settings.redis_namespace}:"
    pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix) + "*"
    found = []
    async for key in pool.scan_iter(match=pattern, count=1000):
        jid = key.decode()[len(in_progress_key_prefix) :]
        run_id, _, attempt = jid[len(prefix) - len(in_progress_key_prefix) :].rpartition(":")
        if run_id.isalnum() and attempt.isdigit():  # another namespace's `<ns>:<more>` is not ours
            found.append((jid, run_id, int(attempt)))
    return found


async def requeue_stale(
    pool: ArqRedis, settings: Settings, run_id: str, attempt: int, queue: str, min_age_s: float
) -> bool:
    """Queue this attempt's job again if a worker marked it started more than `min_age_s` ago
    (and the caller knows the run is still queued: that worker never claimed it)."""
    jid = job_id(settings, run_id, attempt)
    (job_key, _, queue_key), (_, payload, now_ms, _, channel) = _job(
        settings, run_id, attempt, queue
    )
    keys = [in_progress_key_prefix + jid, retry_key_prefix + jid, job_key, queue_key]
    args = [in_progress_ms(settings), int(min_age_s * 1000), expires_extra_ms, payload]
    script = pool.register_script(REQUEUE_STALE_LUA)
    return bool(await script(keys, [*args, now_ms, jid, channel]))


async def drop_job(pool: ArqRedis, settings: Settings, jid: str) -> bool:
    """Take a job whose run has moved on off every queue, with its marker. True if it was on one."""
    keys = [in_progress_key_prefix + jid, retry_key_prefix + jid, job_key_prefix + jid]
    keys += [settings.queue_name(queue) for queue in QUEUES]
    return bool(await pool.register_script(DROP_LUA)(keys, [jid]))
