"""Run webhooks (SPEC §3.3 `notify.url`): a run's terminal status is POSTed to the URL its spec
names, signed, retried with backoff, and every attempt recorded as a `log` event of the run.

Who may be called: only the hosts on `TRM_NOTIFY_ALLOW` (a comma-separated list of host names
or IPs, each with an optional `:port`; `*.example.com` allows the subdomains), loopback included:
a webhook could otherwise reach any port, path and query of the API's and the workers' own
hosts. Submitting checks the URL against the list by its spelling alone (nothing is looked up
while a run is recorded); at delivery the host is resolved, every address it resolves to is
checked, and the request goes to the checked address (the Host header and TLS server name stay
the URL's), so a second lookup cannot send it elsewhere. Link-local, multicast and unspecified
addresses (a cloud's metadata service) are never called, and a name allowed only by a wildcard
is never called at a loopback, private or other non-public address (100.64.0.0/10 included),
unless that very IP is listed. A failed
attempt's event says that it failed, never the status code or connection error the process met
(those go to the process's log): an event is for every client to read. The body is
signed with HMAC-SHA256 under `TRM_NOTIFY_SECRET`: the receiver recomputes
`sha256=<hex hmac of the raw body>` and compares it with the `X-TRM-Signature` header, or with
`X-Hub-Signature-256` (the same value, under the header GitHub uses, which Hermes's webhook
routes and most receivers already verify). Each delivery carries an id stable across its retries,
`<run_id>:<event_id>`, as `X-Request-ID` and `X-GitHub-Delivery` (receivers de-duplicate on it),
and its event name, `trm.run.<status>`, as `X-GitHub-Event` and `X-TRM-Event` (Hermes filters a
route's `events` on `X-GitHub-Event`; a 2xx answer of `{"status": "ignored"}`, Hermes's when the
event is not among them, is recorded as not delivered, `ignored: true`, and not retried). The last
attempt's `log` event says `settled: true`: the SSE stream of a run with a webhook stays open
after the terminal status until then.

Delivery runs in the process that recorded the terminal status (the worker's runner, or the API
for a cancel of a queued run), on a daemon thread, so the caller never waits on a slow receiver.
It is a terminal hook of `core.events`; `core.runstate`, where every terminal status is set,
imports this module, so every process that can end a run delivers its webhooks.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlmodel import Session

from core.events import Publisher, on_terminal_status
from core.models import Run
from core.settings import Settings

log = logging.getLogger("trm.notify")

SIGNATURE_HEADER = "X-TRM-Signature"
GITHUB_SIGNATURE_HEADER = "X-Hub-Signature-256"
USER_AGENT = "trm-trainer-webhook/1"
# Worth another try: the receiver may come back. Other 4xx answers are final.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class NotifyConfig:
    """What delivery needs from the settings (defaults apply where a setting is not defined)."""

    secret: str | None = None
    allow: tuple[str, ...] = ()
    attempts: int = 5
    backoff_s: float = 1.0
    timeout_s: float = 5.0

    @classmethod
    def of(cls, settings: Settings) -> NotifyConfig:
        secret = getattr(settings, "notify_secret", None)
        if secret is not None and hasattr(secret, "get_secret_value"):
            secret = secret.get_secret_value()
        allow = getattr(settings, "notify_allow", "") or ""
        hosts = allow.split(",") if isinstance(allow, str) else list(allow)
        return cls(
            secret=secret or None,
            allow=tuple(h.strip().lower() for h in hosts if h.strip()),
            attempts=max(1, int(getattr(settings, "notify_attempts", 5))),
            backoff_s=float(getattr(settings, "notify_backoff_s", 1.0)),
            timeout_s=float(getattr(settings, "notify_timeout_s", 5.0)),
        )


def settles_within_s(config: NotifyConfig) -> float:
    """The longest a delivery can take: every attempt timing out, plus every backoff sleep."""
    sleeps = config.backoff_s * (2 ** (config.attempts - 1) - 1)
    return config.attempts * config.timeout_s + sleeps


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """The receiver's check, in constant time (used by our tests; receivers copy it)."""
    return header is not None and hmac.compare_digest(sign(secret, body), header)


def resolve_host(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order (an IP gives itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _entry(entry: str) -> tuple[str, int | None]:
    """An allow-list entry as (host, port or None): `hooks.lan`, `127.0.0.1:8644`, `[::1]:8644`,
    `::1`."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host, port = entry, ""
    return host, int(port) if port.isdigit() else None


def _listing(host: str, port: int, allow: tuple[str, ...]) -> str | None:
    """How `host:port` is on the list: "exact", "wildcard" (a `*.` entry), or None."""
    found = None
    for entry in allow:
        name, entry_port = _entry(entry)
        if entry_port is not None and entry_port != port:
            continue
        if host == name:
            return "exact"
        if name.startswith("*.") and host.endswith(name[1:]):
            found = "wildcard"
    return found


def _address_refusal(host: str, port: int, address: str, allow: tuple[str, ...]) -> str | None:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if _listing(str(ip), port, allow) == "exact":
        return None
    how = _listing(host, port, allow)
    if how is None:
        return _not_allowed(host, allow)  # never what it resolves to: no DNS oracle
    if ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return f"host {host!r} resolves to a link-local, multicast or unspecified address"
    # Not global: loopback, private, and the ranges `is_private` leaves out (100.64.0.0/10, the
    # carrier-grade NAT block a tailnet's machines live in; benchmarking, reserved).
    if how == "wildcard" and not ip.is_global:
        return (
            f"host {host!r} is allowed by a wildcard and resolves to a loopback, private or "
            "other non-public address: list it, or the address, by itself"
        )
    return None


def _not_allowed(host: str, allow: tuple[str, ...]) -> str:
    listed = ", ".join(allow) or "nothing"
    return (
        f"host {host!r} is not allowed: only TRM_NOTIFY_ALLOW hosts ({listed}) are called, "
        "loopback included"
    )


@dataclass(frozen=True)
class Target:
    """Where a checked URL is called: `url` names the address, `host` is the URL's own."""

    url: str
    host: str
    tls_name: str | None


def _parse(url: str) -> tuple[Any, str, int] | str:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        return f"{url!r} is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"{url!r}: only http and https URLs are called"
    if not host:
        return f"{url!r} names no host"
    if parts.username or parts.password:
        return f"{url!r}: credentials in the URL are refused (the body is signed instead)"
    return parts, host, port


def pin(url: str, allow: tuple[str, ...], resolve: Resolver = resolve_host) -> Target | str:
    """The checked address to call for `url`, or why it may not be called."""
    parsed = _parse(url)
    if isinstance(parsed, str):
        return parsed
    parts, host, port = parsed
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        addresses = []
    if not addresses:
        if _listing(host, port, allow):
            return f"host {host!r} does not resolve"
        return _not_allowed(host, allow)
    for address in addresses:
        refusal = _address_refusal(host, port, address, allow)
        if refusal:
            return refusal
    address = addresses[0].split("%")[0]
    netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    pinned = parts._replace(netloc=netloc).geturl()
    host_header = parts.netloc.rpartition("@")[2]
    return Target(pinned, host_header, host if parts.scheme == "https" else None)


def url_refusal(url: str, allow: tuple[str, ...]) -> str | None:
    """Why `url` may not be called (None: it may), by its spelling alone: checked when a run is
    submitted, where nothing slow may happen (a host name that takes 30 s to resolve held up
    every client's submission in the same batch). Delivery resolves and checks it again."""
    parsed = _parse(url)
    if isinstance(parsed, str):
        return parsed
    _, host, port = parsed
    if _listing(host, port, allow) is None:
        return _not_allowed(host, allow)
    return None


def check_notify_url(url: str, settings: Settings) -> str | None:
    """For the API's spec validation: None, or the message a 422 on `notify.url` carries."""
    return url_refusal(url, NotifyConfig.of(settings).allow)


def webhook_body(run: Run, status_event: dict[str, Any]) -> dict[str, Any]:
    """What the receiver gets: the terminal status event, plus where to look next."""
    base = f"/runs/{run.id}"
    return {
        "type": "run.status",
        "event_id": status_event.get("id"),
        "run_id": run.id,
        "kind": run.kind,
        "name": run.name,
        "status": run.status,
        "failure_class": run.failure_class,
        "failure_reason": run.failure_reason,
        "stopped_by": run.stopped_by,
        "attempt": run.attempt,
        "worker_id": run.worker_id,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "status_event": status_event.get("data"),
        "links": {
            "run": base,
            "card": f"{base}/card?format=text",
            "artifacts": f"{base}/artifacts",
            "summary": f"{base}/artifacts/summary.json",
        },
    }


def deliver(
    publisher: Publisher,
    run_id: str,
    url: str,
    payload: dict[str, Any],
    config: NotifyConfig,
    sleep: Callable[[float], None] = time.sleep,
    resolve: Resolver = resolve_host,
) -> bool:
    """POST `payload` to `url` until it is accepted (2xx) or the attempts run out; each attempt
    becomes a `log` event. True when delivered. Each attempt resolves and checks the host again
    and connects to the address it checked."""
    target = pin(url, config.allow, resolve)
    if isinstance(target, str):
        _record(publisher, run_id, url, 0, False, config, error=f"refused: {target}", settled=True)
        return False
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True, default=str).encode()
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    event = f"trm.run.{payload.get('status')}"
    headers["X-GitHub-Event"] = headers["X-TRM-Event"] = event
    if payload.get("event_id") is not None:
        headers["X-TRM-Event-Id"] = str(payload["event_id"])
        delivery_id = f"{run_id}:{payload['event_id']}"
        headers["X-Request-ID"] = headers["X-GitHub-Delivery"] = delivery_id
    if config.secret:
        headers[SIGNATURE_HEADER] = headers[GITHUB_SIGNATURE_HEADER] = sign(config.secret, body)
    with httpx.Client(timeout=config.timeout_s, follow_redirects=False) as client:
        for attempt in range(1, config.attempts + 1):
            delay = config.backoff_s * 2 ** (attempt - 1) if attempt < config.attempts else None
            headers["X-TRM-Delivery-Attempt"] = str(attempt)
            if attempt > 1:
                target = pin(url, config.allow, resolve)
                if isinstance(target, str):
                    _record(
                        publisher, run_id, url, attempt, False, config, error=target, settled=True
                    )
                    return False
            headers["Host"] = target.host
            extensions = {"sni_hostname": target.tls_name} if target.tls_name else {}
            try:
                response = client.post(
                    target.url, content=body, headers=headers, extensions=extensions
                )
            except httpx.HTTPError as exc:
                log.warning("webhook %s for %s, attempt %d: %r", url, run_id, attempt, exc)
                _record(
                    publisher,
                    run_id,
                    url,
                    attempt,
                    False,
                    config,
                    delay,
                    status_code=None,
                    settled=delay is None,
                )
            else:
                answered = 200 <= response.status_code < 300
                final = answered or response.status_code not in RETRY_STATUSES
                ignored = answered and _ignored(response)
                ok = answered and not ignored
                if not answered:
                    log.warning(
                        "webhook %s for %s, attempt %d: answered %d",
                        url,
                        run_id,
                        attempt,
                        response.status_code,
                    )
                # Only an answered delivery says its status code: a failure's code (or
                # connection error) would let any client probe the ports the service can reach.
                _record(
                    publisher,
                    run_id,
                    url,
                    attempt,
                    ok,
                    config,
                    None if final else delay,
                    status_code=response.status_code if answered else None,
                    settled=final or delay is None,
                    **({"ignored": True, "event": event} if ignored else {}),
                )
                if final:
                    return ok
            if delay is None:
                return False
            sleep(delay)
    return False


def _ignored(response: httpx.Response) -> bool:
    """A 2xx that says the receiver dropped the delivery: Hermes's webhook route answers
    `{"status": "ignored"}` when the event is not in the route's `events` (or a filter or
    script drops it); nothing reached its agent, so the webhook was not delivered."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == "ignored"


def _record(
    publisher: Publisher,
    run_id: str,
    url: str,
    attempt: int,
    ok: bool,
    config: NotifyConfig,
    retry_in_s: float | None = None,
    **extra: Any,
) -> None:
    data: dict[str, Any] = {
        "source": "notify",
        "level": "info" if ok else "warning",
        "url": url,
        "attempt": attempt,
        "max_attempts": config.attempts,
        "delivered": ok,
        "signed": bool(config.secret),
        "retry_in_s": retry_in_s,
        **extra,
    }
    what = "delivered" if ok else "not delivered"
    data["message"] = f"webhook {what} to {url} (attempt {attempt}/{config.attempts})" + (
        f"; retrying in {retry_in_s:g}s" if retry_in_s else ""
    )
    if extra.get("ignored"):
        data["message"] = (
            f"webhook not delivered: {url} ignored {extra.get('event')} (not among its route's "
            "events, or its filter dropped it)"
        )
    try:
        publisher.publish(run_id, "log", data)
    except Exception as exc:  # the record is best effort; delivery itself must go on
        log.warning("could not record webhook attempt for %s: %s", run_id, exc)


@on_terminal_status
def on_terminal(publisher: Publisher, status_event: dict[str, Any]) -> threading.Thread | None:
    """After a terminal `status` event is committed: if the run's spec names `notify.url`, deliver
    in the background. Returns the delivery thread (None when there is nothing to deliver)."""
    data = status_event.get("data") or {}
    if status_event.get("type") != "status" or not data.get("terminal"):
        return None
    run_id = str(status_event.get("run_id") or data.get("run_id"))
    with Session(publisher.engine) as session:
        run = session.get(Run, run_id)
        if run is None:
            return None
        url = ((run.spec or {}).get("notify") or {}).get("url")
        if not url:
            return None
        payload = webhook_body(run, status_event)
    config = NotifyConfig.of(publisher.settings)
    thread = threading.Thread(
        target=_deliver_quietly,
        args=(publisher, run_id, url, payload, config),
        name=f"notify-{run_id}",
        daemon=True,
    )
    thread.start()
    return thread


def _deliver_quietly(
    publisher: Publisher, run_id: str, url: str, payload: dict[str, Any], config: NotifyConfig
) -> None:
    try:
        deliver(publisher, run_id, url, payload, config)
    except Exception:  # a background thread has nobody to raise to
        log.exception("webhook delivery for %s failed", run_id)
