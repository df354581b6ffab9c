"""TRM_API_TOKEN: every route but /healthz needs the bearer token."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import Settings
from tests.conftest import Service


@pytest.fixture
def guarded(env: dict[str, str], migrated: Settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    logs.mkdir()
    svc = Service({**env, "TRM_API_TOKEN": "s3cret-token"}, logs)
    svc.start_api()
    yield svc
    svc.stop()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_token_is_required_everywhere_but_healthz(guarded: Service) -> None:
    http = guarded.http
    assert http.get("/healthz").status_code == 200
    assert http.get("/").status_code == 200  # the dashboard's page shell: it asks for the token
    for path in ("/runs", "/readyz", "/metrics", "/openapi.json", "/workers", "/benches"):
        response = http.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "unauthorized"
        assert http.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = http.get("/runs", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200
    posted = http.post("/runs", json={"kind": "selftest"})
    assert posted.status_code == 401
