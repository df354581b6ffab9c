"""Redis connections. Redis carries the queue and live fan-out only; losing it loses no run."""

from __future__ import annotations

from functools import lru_cache

import redis
import redis.asyncio as aioredis

from core.settings import Settings


class RedisNotConfigured(RuntimeError):
    pass


def redis_url(settings: Settings) -> str:
    if not settings.redis_url:
        raise RedisNotConfigured(
            "TRM_REDIS_URL is not set: run `trm up` (which starts an embedded Redis) "
            "or point TRM_REDIS_URL at a server, e.g. redis://127.0.0.1:6379/0"
        )
    return settings.redis_url


@lru_cache(maxsize=8)
def _sync_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def sync_redis(settings: Settings) -> redis.Redis:
    return _sync_client(redis_url(settings))


def async_redis(settings: Settings) -> aioredis.Redis:
    return aioredis.Redis.from_url(redis_url(settings), socket_connect_timeout=2)


def events_channel(settings: Settings, run_id: str) -> str:
    return f"{settings.redis_namespace}:events:{run_id}"


def events_pattern(settings: Settings) -> str:
    return f"{settings.redis_namespace}:events:*"
