"""schemathesis against /openapi.json, derandomized (a fixed seed), over 1,000 generated requests
to the real API process: no 5xx at all, and every 4xx in the uniform error body."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from app.main import create_app
from core.settings import Settings
from tests.conftest import Service
from tests.stack import REDIS_URL, Scratch, create_database

EXAMPLES_PER_OPERATION = 120
SEEN: Counter[int] = Counter()

OPENAPI = create_app(Settings(database_url="sqlite://", redis_url=REDIS_URL)).openapi()  # type: ignore[call-arg]
# A data set's upload body (PUT /datasets/{name}) is an archive or a JSONL file: bytes to the fuzz.
schemathesis.serializer.alias(
    ["application/gzip", "application/x-tar", "application/zip", "application/x-ndjson"],
    "application/octet-stream",
)
schema = schemathesis.openapi.from_dict(OPENAPI)
# Path parts the fuzz does not draw: over NAME_MAX (255 bytes), and over PATH_MAX (4096 bytes).
LONG_PARTS = ("n" * 300, "/".join(["d" * 200] * 30))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("fuzz")
    scratch = Scratch(root, create_database("sqlite", root))
    scratch.migrate()
    (root / "logs").mkdir()
    service = Service({**scratch.env, "TRM_SSE_KEEPALIVE_S": "0.2"}, root / "logs")
    service.start_decider()  # /controllers/{name}/decide forwards to it
    service.start_api()
    yield service
    service.stop()
    scratch.forget()


@schema.exclude(path_regex=r".*/events$").parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_never_answers_5xx_and_every_4xx_is_uniform(case, api: Service) -> None:  # type: ignore[no-untyped-def]
    response = case.call(base_url=api.url, timeout=30)
    SEEN[response.status_code] += 1
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    if 400 <= response.status_code < 500:
        body = response.json()
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"code", "message", "details"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def test_every_path_parameter_over_the_filesystems_limits_is_never_5xx(api: Service) -> None:
    """Each route's path parameters in turn over NAME_MAX and PATH_MAX, the others naming a real
    run and bench, so the long part reaches the filesystem (it was a 500, and the client's next
    request on that connection was dropped)."""
    with httpx.Client(base_url=api.url, timeout=30) as http:
        real = {
            "run_id": http.post("/runs", json={"kind": "selftest", "dry_run": True}).json()["id"],
            "name": "routerbench",
            "path": "summary.json",
        }
        for template, operations in OPENAPI["paths"].items():
            params = [p.strip("{}") for p in template.split("/") if p.startswith("{")]
            if not params or template.endswith("/events"):
                continue
            for method, param, long in (
                (m, p, v) for m in operations for p in params for v in LONG_PARTS
            ):
                url = template
                for name in params:
                    url = url.replace(f"{{{name}}}", long if name == param else real[name])
                body = {"content": b"{}", "headers": {"Content-Type": "application/json"}}
                response = http.request(method.upper(), url, **body)  # type: ignore[arg-type]
                assert response.status_code < 500, (method, template, param, response.text[:300])
                assert set(response.json()) == {"error"}, (method, template, response.text[:300])


def test_zz_the_fuzz_sent_over_1000_requests() -> None:
    """Runs after the fuzz in this module (pytest keeps file order)."""
    if not SEEN:
        pytest.skip("run with the fuzz test above")
    assert sum(SEEN.values()) >= 1000, dict(SEEN)
    print("status codes seen:", dict(sorted(SEEN.items())))
