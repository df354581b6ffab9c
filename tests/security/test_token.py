"""TRM_API_TOKEN: every route but /healthz refuses a missing or wrong token with 401, tokens are
compared in constant time, and no token or secret lands in events, manifests, files or logs."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, select

from core.db import make_engine
from core.models import Event, Run, Stage
from core.settings import Settings
from tests.conftest import Service, run_async

TOKEN = "tok-3f9a1c7e55d2"
DB_PASSWORD = "pw-91b7d0c4"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    url = env["TRM_DATABASE_URL"]
    if url.startswith("postgresql://postgres@"):  # trust auth: any password is accepted
        url = url.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1)
    return {**env, "TRM_API_TOKEN": TOKEN, "TRM_DATABASE_URL": url}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def concrete(path: str, run_id: str) -> str:
    return (
        path.replace("{run_id}", run_id)
        .replace("{path}", "summary.json")
        .replace("{name}", "routerbench")
    )


def test_every_route_but_healthz_needs_the_token(service: Service) -> None:
    run_id = service.submit({"kind": "selftest", "dry_run": True}, **auth(TOKEN))["id"]
    schema = service.http.get("/openapi.json", headers=auth(TOKEN)).json()
    routes = [(m.upper(), p) for p, ops in schema["paths"].items() for m in ops]
    routes += [("GET", "/openapi.json"), ("GET", "/docs")]
    assert len(routes) >= 12
    for method, path in routes:
        if path == "/":  # the dashboard's page shell holds no data; it asks for the token
            continue
        url = concrete(path, run_id)
        for headers in ({}, auth("wrong"), auth(TOKEN + "x"), {"Authorization": TOKEN}):
            response = service.http.request(method, url, headers=headers)
            if path == "/healthz":
                assert response.status_code == 200
                continue
            assert response.status_code == 401, (method, path, headers, response.status_code)
            if response.headers.get("content-type", "").startswith("application/json"):
                assert response.json()["error"]["code"] == "unauthorized"


def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check goes through hmac.compare_digest (the API process is checked by reading the
    dependency it installs, here in-process: no service, no database)."""
    from starlette.requests import Request

    from app import deps

    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(deps.hmac, "compare_digest", spy)
    app_state = type("S", (), {"settings": Settings(api_token=TOKEN)})()  # type: ignore[call-arg]
    app = type("A", (), {"state": type("T", (), {"trm": app_state})()})()
    scope = {
        "type": "http",
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        "app": app,
    }
    run_async(deps.require_token(Request(scope)))
    assert calls == [(TOKEN.encode(), TOKEN.encode())]


def test_no_token_or_password_is_written_anywhere(
    service: Service, settings: Settings, tmp_path: Path
) -> None:
    service.start_worker()
    run = service.submit({"kind": "selftest", "steps": 4, "step_seconds": 0.01}, **auth(TOKEN))
    service.http.headers.update(auth(TOKEN))
    done = service.wait_status(run["id"], "completed", "failed", timeout=60)
    assert done["status"] == "completed"
    service.http.get("/readyz")
    service.http.get("/runs", headers=auth("wrong-" + TOKEN))  # a wrong token is not logged either
    secrets = [TOKEN, DB_PASSWORD]
    leaks = []
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix not in (".db", ".db-wal", ".db-shm"):
            text = path.read_bytes().decode("utf-8", "replace")
            leaks += [f"{path}: {s}" for s in secrets if s in text]
    engine = make_engine(settings.database_url)
    with Session(engine) as db:
        rows: list[Any] = [*db.exec(select(Event)), *db.exec(select(Run)), *db.exec(select(Stage))]
        for row in rows:
            dumped = row.model_dump_json()
            leaks += [f"{type(row).__name__} {row.id}: {s}" for s in secrets if s in dumped]
    engine.dispose()
    assert not leaks, leaks
