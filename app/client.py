"""A small HTTP client for the API (the CLI uses it; so can scripts). Reads the API's address from
TRM_URL (the skill's name; TRM_API_URL is read too, TRM_URL wins) and TRM_API_TOKEN."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx

from core.dataset_pack import Packed


class ApiCallError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        self.status, self.code = status, err.get("code", "error")
        self.details = err.get("details")
        super().__init__(err.get("message") or f"HTTP {status}: {body}")


DEFAULT_URL = "http://127.0.0.1:8000"


def api_url(given: str | None = None) -> str:
    """`--url`, else TRM_URL, else TRM_API_URL, else the default `trm up` address."""
    return given or os.environ.get("TRM_URL") or os.environ.get("TRM_API_URL") or DEFAULT_URL


class Client:
    def __init__(self, base_url: str | None = None, token: str | None = None, timeout: float = 30):
        self.base_url = api_url(base_url)
        token = token or os.environ.get("TRM_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def _json(self, response: httpx.Response) -> Any:
        try:
            body = response.json()
        except json.JSONDecodeError:
            body = response.text
        if response.status_code >= 400:
            raise ApiCallError(response.status_code, body)
        return body

    def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._json(self.http.post("/runs", json=spec, headers=headers))

    def runs(self, **params: Any) -> dict[str, Any]:
        clean = {k: v for k, v in params.items() if v is not None}
        return self._json(self.http.get("/runs", params=clean))

    def run(self, run_id: str) -> dict[str, Any]:
        return self._json(self.http.get(f"/runs/{run_id}"))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return self._json(self.http.post(f"/runs/{run_id}/cancel"))

    def artifact(self, run_id: str, path: str | None = None) -> Any:
        """The run's file list (JSON), or one file's bytes."""
        if not path:
            return self._json(self.http.get(f"/runs/{run_id}/artifacts"))
        response = self.http.get(f"/runs/{run_id}/artifacts/{path}")
        if response.status_code >= 400:
            self._json(response)
        return response.content

    def datasets(self) -> dict[str, Any]:
        return self._json(self.http.get("/datasets"))

    def dataset(self, name: str) -> dict[str, Any]:
        return self._json(self.http.get(f"/datasets/{name}"))

    def delete_dataset(self, name: str) -> dict[str, Any]:
        return self._json(self.http.delete(f"/datasets/{name}"))

    def push_dataset(self, packed: Packed, name: str, replace: bool = False) -> dict[str, Any]:
        """Stream the packed upload (never read whole into memory) as data set `name`."""
        params = {"replace": "true"} if replace else {}
        if packed.filename:
            params["filename"] = packed.filename
        headers = {"X-Content-SHA256": packed.sha256, "Content-Type": packed.content_type}
        with packed.file.open("rb") as body:
            response = self.http.put(
                f"/datasets/{name}",
                content=body,
                params=params,
                headers=headers,
                timeout=httpx.Timeout(30, write=None, read=600),
            )
        return self._json(response)

    def card_text(self, run_id: str) -> str:
        response = self.http.get(f"/runs/{run_id}/card", params={"format": "text"})
        if response.status_code >= 400:
            self._json(response)
        return response.text

    def events(self, run_id: str, after: int = 0, retries: int = 30) -> Iterator[dict[str, Any]]:
        """Every event of the run from `after` on; reconnects with Last-Event-ID after a drop."""
        last = after
        failures = 0
        while True:
            try:
                headers = {"Last-Event-ID": str(last), "Accept": "text/event-stream"}
                with self.http.stream(
                    "GET",
                    f"/runs/{run_id}/events",
                    headers=headers,
                    timeout=httpx.Timeout(30, read=None),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        self._json(response)
                    for event in iter_sse(response.iter_lines()):
                        failures = 0
                        last = event["id"]
                        yield event
                        if event["type"] == "status" and event["data"].get("terminal"):
                            return
                return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                failures += 1
                if failures > retries:
                    raise
                time.sleep(min(2.0, 0.2 * failures))


def iter_sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Parse a text/event-stream into our event dicts (the `data:` field holds the whole event)."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield json.loads("\n".join(data))
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
