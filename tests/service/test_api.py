"""The runs API over a real uvicorn, on SQLite and on Postgres."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import Service, run_async

SELFTEST = {"kind": "selftest", "steps": 3, "step_seconds": 0.01}


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]  # type: ignore[no-any-return]


def test_submit_returns_202_and_the_run_is_queued(shared_service: Service) -> None:
    response = shared_service.http.post("/runs", json=SELFTEST)
    assert response.status_code == 202
    run = response.json()
    assert run["status"] == "queued" and run["kind"] == "selftest" and run["attempt"] == 1
    assert response.headers["location"] == f"/runs/{run['id']}"
    shown = shared_service.run(run["id"])
    assert shown["spec"]["steps"] == 3
    assert shown["card"] is None or shown["card"]["run_id"] == run["id"]


def test_unknown_key_gets_422_naming_the_field(shared_service: Service) -> None:
    spec = {
        "kind": "train",
        "corpus": {"sources": [{"type": "jsonl", "name": "a", "path": "x.jsonl", "colour": 1}]},
    }
    err = error_of(shared_service.http.post("/runs", json=spec))
    assert err["code"] == "validation_error"
    assert err["details"][0]["field"] == "corpus.sources[0].colour"
    assert "corpus.sources[0].colour" in err["message"]


def test_bad_values_and_kinds_get_422_naming_the_field(shared_service: Service) -> None:
    response = shared_service.http.post("/runs", json={"kind": "selftest", "steps": 0})
    assert response.status_code == 422
    assert error_of(response)["details"][0]["field"] == "steps"
    response = shared_service.http.post("/runs", json={"kind": "party"})
    assert response.status_code == 422
    assert error_of(response)["details"][0]["field"] == "kind"
    response = shared_service.http.post("/runs", json=[1, 2])
    assert response.status_code == 422


def test_malformed_json_names_line_and_column(shared_service: Service) -> None:
    response = shared_service.http.post(
        "/runs",
        content=b'{"kind": "selftest",\n "steps": }',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    err = error_of(response)
    assert err["code"] == "bad_json" and err["details"] == {"line": 2, "column": 11}


def test_spec_over_the_settings_limits_is_refused(shared_service: Service) -> None:
    response = shared_service.http.post("/runs", json={"kind": "selftest", "steps": 10**9})
    assert response.status_code == 422
    assert error_of(response)["details"][0]["field"] == "steps"


def test_body_over_one_mib_gets_413(shared_service: Service) -> None:
    big = {"kind": "selftest", "name": "x", "pad": "y" * (1024 * 1024 + 10)}
    response = shared_service.http.post(
        "/runs", content=json.dumps(big).encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"


def test_same_idempotency_key_and_body_gives_one_run(service: Service) -> None:
    first = service.submit(SELFTEST, **{"Idempotency-Key": "k-1"})
    again = service.http.post("/runs", json=SELFTEST, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 202
    assert again.json()["id"] == first["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    runs = service.http.get("/runs", params={"kind": "selftest"}).json()["runs"]
    assert [r["id"] for r in runs] == [first["id"]]


def test_an_empty_idempotency_key_is_refused(shared_service: Service) -> None:
    for _ in range(2):
        response = shared_service.http.post("/runs", json=SELFTEST, headers={"Idempotency-Key": ""})
        assert response.status_code == 422
        assert error_of(response)["details"][0]["field"] == "Idempotency-Key"


def test_same_idempotency_key_with_another_body_is_409(shared_service: Service) -> None:
    shared_service.submit(SELFTEST, **{"Idempotency-Key": "k-2"})
    other = dict(SELFTEST, steps=4)
    response = shared_service.http.post("/runs", json=other, headers={"Idempotency-Key": "k-2"})
    assert response.status_code == 409
    assert error_of(response)["code"] == "idempotency_conflict"


def test_list_runs_pages_with_a_cursor_and_filters(service: Service) -> None:
    ids = [service.submit(dict(SELFTEST, name=f"r{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2, "kind": "selftest"}
        if cursor:
            params["cursor"] = cursor
        page = service.http.get("/runs", params=params).json()
        seen += [r["id"] for r in page["runs"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert pages == 3
    assert seen == sorted(ids, reverse=True)  # newest first, each exactly once
    assert service.http.get("/runs", params={"status": "completed"}).json()["runs"] == []
    bad = service.http.get("/runs", params={"status": "done"})
    assert bad.status_code == 422 and error_of(bad)["details"][0]["field"] == "status"
    bad = service.http.get("/runs", params={"cursor": "nonsense"})
    assert bad.status_code == 422


def test_unknown_run_is_404_in_the_uniform_body(shared_service: Service) -> None:
    for path in ("/runs/NOPE", "/runs/NOPE/card", "/runs/NOPE/events", "/runs/NOPE/artifacts"):
        response = shared_service.http.get(path)
        assert response.status_code == 404, path
        assert error_of(response)["code"] == "not_found"


def test_cancel_of_a_queued_run_ends_it_at_once(shared_service: Service) -> None:
    run = shared_service.submit(SELFTEST)
    response = shared_service.http.post(f"/runs/{run['id']}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"
    assert shared_service.run(run["id"])["finished_at"] is not None
    again = shared_service.http.post(f"/runs/{run['id']}/cancel")
    assert again.status_code == 202 and again.json()["status"] == "cancelled"


def test_card_text_is_a_box_of_equal_lines(shared_service: Service) -> None:
    run = shared_service.submit(SELFTEST)
    text = shared_service.http.get(f"/runs/{run['id']}/card", params={"format": "text"}).text
    lines = text.rstrip("\n").splitlines()
    assert len(lines) == 7 and len({len(line) for line in lines}) == 1
    assert run["id"] in lines[0] and "estimating" in text
    card = shared_service.http.get(f"/runs/{run['id']}/card").json()
    assert card["run_id"] == run["id"] and card["status"] == "queued"


def test_artifact_paths_cannot_leave_the_run_dir(shared_service: Service) -> None:
    run = shared_service.submit(SELFTEST)
    for path in ("../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd"):
        response = shared_service.http.get(f"/runs/{run['id']}/artifacts/{path}")
        assert response.status_code in (400, 404), path
        assert "root:" not in response.text
    listing = shared_service.http.get(f"/runs/{run['id']}/artifacts").json()
    assert [a["path"] for a in listing["artifacts"]] == ["events.jsonl"]


def test_health_ready_and_metrics(service: Service) -> None:
    assert service.http.get("/healthz").json() == {"status": "ok"}
    ready = service.http.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True and body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is True and body["checks"]["workers"]["alive"] == 0
    service.submit(SELFTEST)
    metrics = service.http.get("/metrics").text
    assert 'trm_runs{status="queued"} 1' in metrics
    assert "trm_api_rss_bytes" in metrics


def test_openapi_describes_the_run_spec(shared_service: Service) -> None:
    schema = shared_service.http.get("/openapi.json").json()
    assert "RunSpec" in schema["components"]["schemas"]
    assert "TrainSpec" in schema["components"]["schemas"]


def test_the_load_bench_s_raw_client_is_served_as_any_client(shared_service: Service) -> None:
    # bench/load.py speaks HTTP/1.1 on its own sockets (bench/loadgen.py): what it sends must
    # pass the API's checks (a Host the API refuses stopped the bench before its first run).
    from bench.loadgen import SPEC, Connection

    async def submit() -> tuple[int, bytes]:
        connection = Connection(shared_service.port)
        try:
            return await connection.post("/runs", SPEC)
        finally:
            connection.close()

    status, body = run_async(submit())
    assert status == 202, body
    assert shared_service.run(json.loads(body)["id"])["status"] == "queued"
