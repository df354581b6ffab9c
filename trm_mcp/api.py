"""The API as the MCP tools see it: async calls that return JSON or raise `ApiFailure`, which
carries our error body (code, message, details) so that a tool error names the field to fix."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


def api_url() -> str:
    # The same order as the CLI (app/client.py): TRM_URL wins over TRM_API_URL.
    return os.environ.get("TRM_URL") or os.environ.get("TRM_API_URL") or DEFAULT_URL


class ApiFailure(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.body = status, body
        super().__init__(json.dumps(body))


def auth_hint(status: int) -> str | None:
    if status != 401:
        return None
    return (
        "401 unauthorized: the API wants a token. Set the TRM_API_TOKEN variable in the MCP "
        "server's environment (Hermes: mcp_servers.trm.env), or over HTTP send it as the bearer "
        "token (Hermes: mcp_servers.trm.headers)."
    )


class Api:
    """One API, one token. `client` is given when the API mounts the server (in-process calls).
    `local_files`: whether a tool may read paths on this host for the caller (a data set push);
    not inside the API, where it would read the API host's files past TRM_DATA_DIR."""

    def __init__(self, client: httpx.AsyncClient, local_files: bool = True) -> None:
        self.http, self.local_files = client, local_files

    @classmethod
    def from_env(cls) -> Api:
        """The operator's own process (stdio): the environment's token."""
        token = os.environ.get("TRM_API_TOKEN")
        return cls.for_caller(f"Bearer {token}" if token else None)

    @classmethod
    def for_caller(cls, authorization: str | None) -> Api:
        """An HTTP caller's call: its own Authorization header, or none."""
        headers = {"Authorization": authorization} if authorization else {}
        return cls(httpx.AsyncClient(base_url=api_url(), headers=headers, timeout=30))

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        content: Any = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        extra: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        try:
            response = await self.http.request(
                method,
                path,
                json=json_body,
                params=clean,
                headers=headers,
                content=content,
                **extra,
            )
        except httpx.TransportError as exc:
            raise ApiFailure(
                0,
                {
                    "error": {
                        "code": "unreachable",
                        "message": f"cannot reach the API at {self.http.base_url} ({exc}); "
                        "point TRM_URL at the server (`trm up` prints it)",
                        "details": None,
                    }
                },
            ) from exc
        if response.status_code >= 400:
            try:
                body = response.json()
            except json.JSONDecodeError:
                body = {"error": {"code": "http_error", "message": response.text[:2000]}}
            if not isinstance(body, dict) or "error" not in body:
                body = {"error": {"code": "http_error", "message": str(body)[:2000]}}
            body["status"] = response.status_code
            if hint := auth_hint(response.status_code):
                body["hint"] = hint
            raise ApiFailure(response.status_code, body)
        return response

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.call(method, path, **kwargs)).json()

    async def aclose(self) -> None:
        await self.http.aclose()
