"""What a web page the operator happens to open cannot do to the API (a token-less API above all,
the `trm up` / `trm demo` default):

- **Rebinding**: a page that points its own name at the API's address sends its own name as the
  `Host` and gets 421. The `Host` must be a loopback name, an IP address (a browser sends an
  address only when the page's own URL is that address: no name was rebound) or a name the
  operator lists in `TRM_ALLOWED_HOSTS` (any port). The check holds on a loopback bind, on any
  bind of an API without a token (bound to 0.0.0.0 it is as open to a page in the operator's
  browser as to the network), and wherever `TRM_ALLOWED_HOSTS` is set. An API with a token on
  a wider bind (compose: workers call it by service name) is left to its token: a page cannot
  present it.
- **Cross-site writes**: a state-changing request (POST, PUT, PATCH, DELETE) that carries an
  `Origin` must come from the API's own origin (the dashboard) or a listed host: 403 otherwise.
- **Framing**: every answer says no page may frame it (`X-Frame-Options: DENY`, CSP
  `frame-ancestors 'none'`) and carries `X-Content-Type-Options: nosniff`.
- **Simple requests**: a state-changing request with a body must say `application/json` (415
  otherwise), so a form or a `text/plain` fetch, which a browser sends cross-site without asking,
  is never read as a spec. Uploads keep their own content type: artifacts (`PUT
  /runs/{id}/artifacts/...`, a worker's binary stream behind its upload key and lease) and data
  sets (`PUT /datasets/{name}`, an archive behind the token, its types checked by its route).
"""

from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.errors import error_body

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Every answer: no page may frame the dashboard (a framed, token-less dashboard is the API's own
# origin, so a page could have the operator click its cancel button unseen), and no browser
# guesses a type the API did not send.
NO_FRAMING = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
]


def host_name(value: str) -> str:
    """`name:port`, `[v6]:port` or a bare name -> the name, lower case, without brackets. A
    port that is not digits leaves the value whole (`localhost:80@evil.com` is no loopback
    name)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name if rest == "" or (rest[:1] == ":" and rest[1:].isdigit()) else value
    if value.count(":") == 1:
        name, _, port = value.partition(":")
        return name if port.isdigit() else value
    return value


def is_loopback(name: str) -> bool:
    return host_name(name) in LOOPBACK_NAMES


def is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class BrowserGuard:
    """`bind`: the address the server listens on; `allowed_hosts`: TRM_ALLOWED_HOSTS;
    `open_api`: no token is set, so the Host check holds on every bind."""

    def __init__(
        self, app: ASGIApp, bind: str, allowed_hosts: list[str], open_api: bool = False
    ) -> None:
        self.app = app
        self.allowed = {host_name(h) for h in allowed_hosts if h.strip()}
        self.check_host = is_loopback(bind) or open_api or bool(self.allowed)

    def host_allowed(self, host: str) -> bool:
        name = host_name(host)
        return name in LOOPBACK_NAMES or is_address(name) or name in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.refusal(scope["method"], scope["path"], headers)
        if refusal is None:

            async def framed_by_none(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), *NO_FRAMING]}
                await send(message)

            await self.app(scope, receive, framed_by_none)
            return
        status, code, message = refusal
        body = json.dumps(error_body(code, message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def refusal(
        self, method: str, path: str, headers: dict[str, str]
    ) -> tuple[int, str, str] | None:
        host = headers.get("host", "")
        if self.check_host and not self.host_allowed(host):
            return (
                421,
                "misdirected_request",
                f"Host {host[:100]!r} is not a name of this API; add it to "
                "TRM_ALLOWED_HOSTS if clients reach the API by it",
            )
        if method not in STATE_CHANGING:
            return None
        origin = headers.get("origin")
        if origin is not None and not self._same_or_allowed(origin, host):
            return (
                403,
                "forbidden_origin",
                f"a {method} from origin {origin[:100]!r} (another site) is refused; "
                "call the API from its own origin or a host in TRM_ALLOWED_HOSTS",
            )
        # PUT is an upload alone (an artifact or a data set, each checking its own content
        # type); so does the MCP transport.
        if method == "PUT" or path == "/mcp":
            return None
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        has_body = headers.get("content-length", "0") not in ("", "0") or (
            "transfer-encoding" in headers
        )
        if (kind or has_body) and kind != "application/json":
            return (
                415,
                "unsupported_media_type",
                f"send the body as JSON (Content-Type: application/json), not "
                f"{kind or 'an untyped body'!r}",
            )
        return None

    def _same_or_allowed(self, origin: str, host: str) -> bool:
        if origin == "null":
            return False
        netloc = urlsplit(origin).netloc.lower()
        return netloc == host.strip().lower() or host_name(netloc) in self.allowed
