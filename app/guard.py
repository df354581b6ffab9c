"""What a web page the operator happens to open cannot do to the API (a token-less API above all,
the `trm up` / `trm demo` default):

- **Rebinding**: bound to a loopback address, the API answers only requests whose `Host` is a
  loopback name (any port) or one the operator lists in `TRM_ALLOWED_HOSTS`; a page that points
  its own name at 127.0.0.1 sends its own name and gets 421. Bound elsewhere, the list applies
  when it is set.
- **Cross-site writes**: a state-changing request (POST, PUT, PATCH, DELETE) that carries an
  `Origin` must come from the API's own origin (the dashboard) or a listed host: 403 otherwise.
- **Simple requests**: a state-changing request with a body must say `application/json` (415
  otherwise), so a form or a `text/plain` fetch, which a browser sends cross-site without asking,
  is never read as a spec. Uploads keep their own content type: artifacts (`PUT
  /runs/{id}/artifacts/...`, a worker's binary stream behind its upload key and lease) and data
  sets (`PUT /datasets/{name}`, an archive behind the token, its types checked by its route).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from core.errors import error_body

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def host_name(value: str) -> str:
    """`name:port`, `[v6]:port` or a bare name -> the name, lower case, without brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_loopback(name: str) -> bool:
    return host_name(name) in LOOPBACK_NAMES


class BrowserGuard:
    def __init__(self, app: ASGIApp, bind: str, allowed_hosts: list[str]) -> None:
        self.app = app
        self.allowed = {host_name(h) for h in allowed_hosts if h.strip()}
        self.check_host = is_loopback(bind) or bool(self.allowed)
        if is_loopback(bind):
            self.allowed |= set(LOOPBACK_NAMES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.refusal(scope["method"], scope["path"], headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        body = json.dumps(error_body(code, message)).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    def refusal(
        self, method: str, path: str, headers: dict[str, str]
    ) -> tuple[int, str, str] | None:
        host = headers.get("host", "")
        if self.check_host and host_name(host) not in self.allowed:
            return (421, "misdirected_request",
                    f"Host {host[:100]!r} is not a name of this API; add it to "
                    "TRM_ALLOWED_HOSTS if clients reach the API by it")  # fmt: skip
        if method not in STATE_CHANGING:
            return None
        origin = headers.get("origin")
        if origin is not None and not self._same_or_allowed(origin, host):
            return (403, "forbidden_origin",
                    f"a {method} from origin {origin[:100]!r} (another site) is refused; "
                    "call the API from its own origin or a host in TRM_ALLOWED_HOSTS")  # fmt: skip
        # PUT is an upload alone (an artifact or a data set, each checking its own content
        # type); so does the MCP transport.
        if method == "PUT" or path == "/mcp":
            return None
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        has_body = headers.get("content-length", "0") not in ("", "0") or (
            "transfer-encoding" in headers
        )
        if (kind or has_body) and kind != "application/json":
            return (415, "unsupported_media_type",
                    f"send the body as JSON (Content-Type: application/json), not "
                    f"{kind or 'an untyped body'!r}")  # fmt: skip
        return None

    def _same_or_allowed(self, origin: str, host: str) -> bool:
        if origin == "null":
            return False
        netloc = urlsplit(origin).netloc.lower()
        return netloc == host.strip().lower() or host_name(netloc) in self.allowed - set(
            LOOPBACK_NAMES
        )
