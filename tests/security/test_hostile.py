"""Hand-written hostile input: paths that try to leave their directory, oversized and deeply
nested bodies, NaN and infinities, unknown keys, and specs that ask for absurd amounts of work.
Each is refused with a 4xx in the uniform error body; nothing is read or written outside."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from core.settings import Settings
from tests.conftest import Service

pytestmark = pytest.mark.parametrize("shared_service", ["sqlite"], indirect=True)


@pytest.fixture
def service(shared_service: Service) -> Service:
    """Every test here looks only at what it sends (its own runs, or none): one API for all."""
    return shared_service


@pytest.fixture
def settings(shared_service: Service) -> Settings:
    return shared_service.settings


JSON = {"Content-Type": "application/json"}


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"} and error["message"]
    if code:
        assert error["code"] == code, error
    return error  # type: ignore[no-any-return]


def finished_run(service: Service) -> str:
    return str(service.submit({"kind": "selftest", "dry_run": True})["id"])


def test_artifact_paths_cannot_leave_the_run_dir(service: Service, settings: Settings) -> None:
    run_id = finished_run(service)
    run_dir = settings.runs_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    secret = settings.runs_dir.parent / "secret.txt"
    secret.write_text("not yours")
    (run_dir / "escape").symlink_to(secret)
    (run_dir / "escape_dir").symlink_to(settings.runs_dir.parent, target_is_directory=True)
    for path in (
        "../../secret.txt",
        "..%2F..%2Fsecret.txt",
        "%2e%2e/%2e%2e/secret.txt",
        "/etc/passwd",
        "%2Fetc%2Fpasswd",
        "escape",
        "escape_dir/secret.txt",
        "loop/../../../secret.txt",
        "x%00y",
    ):
        response = service.http.get(f"/runs/{run_id}/artifacts/{path}")
        # A NUL is refused before any route looks at it (422 naming the parameter).
        refused = (422,) if "%00" in path else (400, 404)
        assert response.status_code in refused, (path, response.status_code)
        assert "not yours" not in response.text
        assert_error(response, response.status_code)
    listing = service.http.get(f"/runs/{run_id}/artifacts").json()["artifacts"]
    assert not [a for a in listing if a["path"].startswith("escape")]


def test_artifacts_do_not_serve_the_stage_payload_files(
    service: Service, settings: Settings
) -> None:
    """`.child.json` holds the worker's settings (the database URL with its password)."""
    run_id = finished_run(service)
    hidden = settings.runs_dir / run_id / "loop" / ".child.json"
    hidden.parent.mkdir(parents=True, exist_ok=True)
    hidden.write_text('{"settings": {"database_url": "postgresql://u:hunter2@db/trm"}}')
    response = service.http.get(f"/runs/{run_id}/artifacts/loop/.child.json")
    assert "hunter2" not in response.text
    assert_error(response, 404)


def test_spec_paths_cannot_leave_the_data_dir(service: Service, settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    outside = settings.data_dir.parent / "outside.jsonl"
    outside.write_text('{"state": {}, "tools": ["a"], "action": "a"}\n')
    (settings.data_dir / "link.jsonl").symlink_to(outside)
    for path in ("../outside.jsonl", str(outside), "link.jsonl", "/etc/passwd", "a/../../x"):
        spec = {
            "kind": "train",
            "dry_run": True,
            "corpus": {"sources": [{"type": "jsonl", "name": "x", "path": path}]},
        }
        error = assert_error(service.http.post("/runs", json=spec), 422, "validation_error")
        assert error["details"][0]["field"] == "corpus.sources[0].path", (path, error)


def test_bodies_over_1_mib_get_413(service: Service) -> None:
    big = b'{"kind": "selftest", "name": "' + b"x" * (1024 * 1024) + b'"}'
    assert_error(service.http.post("/runs", content=big, headers=JSON), 413, "payload_too_large")

    def chunks():  # no Content-Length: the limit holds on the bytes actually sent
        for _ in range(20):
            yield b"x" * 65536

    assert_error(
        service.http.post("/runs", content=chunks(), headers=JSON), 413, "payload_too_large"
    )


def test_deeply_nested_json_is_refused_not_crashed(service: Service) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    assert_error(service.http.post("/runs", content=deep, headers=JSON), 400, "bad_json")
    nested: dict[str, Any] = {}
    node = nested
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    body = '{"kind": "selftest", "name": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"
    response = service.http.post("/runs", content=body, headers=JSON)
    assert response.status_code in (400, 422), response.status_code
    assert_error(response, response.status_code)
    assert service.http.get("/healthz").status_code == 200


def test_nan_and_infinities_are_refused(service: Service) -> None:
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        for field in ("step_seconds", "budget"):
            value = literal if field == "step_seconds" else '{"max_seconds": ' + literal + "}"
            body = '{"kind": "selftest", "steps": 3, "' + field + '": ' + value + "}"
            error = assert_error(
                service.http.post("/runs", content=body, headers=JSON), 422, "validation_error"
            )
            assert error["details"][0]["field"].startswith(field), (literal, error)


def test_unknown_keys_are_refused_with_their_path(service: Service) -> None:
    error = assert_error(
        service.http.post("/runs", json={"kind": "selftest", "budget": {"max_secs": 3}}), 422
    )
    assert error["details"][0]["field"] == "budget.max_secs"
    error = assert_error(service.http.post("/runs", json={"kind": "selftest", "evil": 1}), 422)
    assert error["details"][0]["field"] == "evil"


def test_absurd_step_and_candidate_counts_are_refused_by_the_limits(service: Service) -> None:
    error = assert_error(service.http.post("/runs", json={"kind": "selftest", "steps": 10**9}), 422)
    assert error["details"][0]["field"] == "steps" and "limit" in error["message"]
    search = {
        "kind": "hillclimb",
        "base": {
            "corpus": {
                "sources": [{"type": "jsonl", "name": "x", "path": "x.jsonl"}],
                "split": {"by": "env", "anchor": ["a"]},
            }
        },
        "max_candidates": 10**9,
    }
    error = assert_error(service.http.post("/runs", json=search), 422)
    assert "max_candidates" in error["message"], error
    train = {
        "kind": "train",
        "dry_run": True,
        "corpus": {"sources": [{"type": "jsonl", "name": "x", "path": "x.jsonl"}]},
        "trm": {"max_steps": 10**9},
    }
    error = assert_error(service.http.post("/runs", json=train), 422)
    assert error["details"][0]["field"] == "trm.max_steps"


def test_a_kind_that_is_not_a_string_is_a_422(service: Service) -> None:
    for kind in ({}, [], ["train"], {"a": 1}, 3, None):
        error = assert_error(service.http.post("/runs", json={"kind": kind}), 422)
        assert error["details"][0]["field"] == "kind"


def test_a_web_page_cannot_submit_cancel_or_rebind_a_token_less_api(service: Service) -> None:
    """What a page in the operator's browser could send: a cross-site simple POST (text/plain,
    a form), a JSON POST with its own Origin, a cancel with no body, and any request under a
    name it rebound to 127.0.0.1. None creates, cancels or reads anything."""
    before = service.http.get("/runs").json()["runs"]
    spec = '{"kind": "selftest", "steps": 1, "step_seconds": 0}'
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        error = assert_error(
            service.http.post("/runs", content=spec, headers={"Content-Type": kind}),
            415,
            "unsupported_media_type",
        )
        assert "application/json" in error["message"]
    page = {"Origin": "http://evil.example", **JSON}
    assert_error(service.http.post("/runs", content=spec, headers=page), 403, "forbidden_origin")
    assert service.http.get("/runs").json()["runs"] == before
    run = service.http.post("/runs", content=spec, headers=JSON).json()
    cancel = service.http.post(f"/runs/{run['id']}/cancel", headers={"Origin": "null"})
    assert_error(cancel, 403, "forbidden_origin")
    assert service.http.get(f"/runs/{run['id']}").json()["status"] != "cancelled"
    for path in ("/runs", f"/runs/{run['id']}", "/benches", "/mcp"):
        rebound = service.http.get(path, headers={"Host": "evil.example"})
        assert_error(rebound, 421, "misdirected_request")
    # The dashboard (same origin) and plain clients (no Origin) are served as before.
    own = {"Origin": str(service.http.base_url).rstrip("/"), **JSON}
    assert service.http.post("/runs", content=spec, headers=own).status_code == 202
    assert service.http.get("/runs", headers={"Host": "localhost:1"}).status_code == 200
