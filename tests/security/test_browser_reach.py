"""What a web page in the operator's browser, or a caller holding the token, reaches beyond the
cases the browser guard was first built for: a token-less API bound to every interface, the
decision process (`trm decide-server`, which `trm up` starts without a token), JSON bodies of the
controller routes carrying values no database stores, and a page of the decision log read whole
into the API. Each test sends what an attacker would; real API, decision process, worker and
Postgres."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from starlette.types import Receive, Scope, Send

from app.guard import BrowserGuard
from core.controllers import MAX_STATE_CHARS
from core.db import make_engine
from core.decisions import MAX_PAGE, MAX_PAGE_CHARS, record
from core.models import DecisionRecord, new_id
from core.settings import Settings
from tests.conftest import Service
from tests.security.test_hostile import assert_error
from tests.service.test_controllers import Trained
from tests.service.test_controllers import trained as trained  # noqa: F401 - the fixture
from trm_mcp.server import HttpRefused, required_token

DRY = {"kind": "selftest", "dry_run": True}
ROW = {"state": "request: summarize the quarterly report", "tools": ["TRM_ONLY", "LLM_DIRECT"]}


@pytest.fixture
def wide(env: dict[str, str], migrated: Settings, tmp_path: Path) -> Iterator[Service]:
    """A token-less API bound to 0.0.0.0 with no TRM_ALLOWED_HOSTS (as `trm up --host 0.0.0.0`)."""
    svc = Service({**env, "TRM_API_HOST": "0.0.0.0"}, tmp_path / "logs")
    svc.start_api()
    yield svc
    svc.stop()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_token_less_api_on_every_interface_refuses_a_rebound_name_and_a_frame(
    wide: Service,
) -> None:
    """A page whose name the attacker points at this machine sends its own name as the Host and
    its own origin: both agree, so only the Host check stops it (it did not run off loopback)."""
    port = wide.port
    rebound = {"Host": f"rebind.example:{port}", "Origin": f"http://rebind.example:{port}"}
    assert_error(wide.http.get("/runs", headers=rebound), 421, "misdirected_request")
    assert_error(wide.http.post("/runs", json=DRY, headers=rebound), 421, "misdirected_request")
    assert_error(
        wide.http.get("/runs", headers={"Host": f"localhost:80@rebind.example:{port}"}), 421
    )
    # What reaches it by address (no name was rebound), or by a loopback name, is served.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"192.0.2.10:{port}", f"[::1]:{port}"):
        answer = wide.http.get("/runs", headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)
    assert answer.json()["runs"] == []  # nothing was submitted through the rebound name
    # No page may frame the dashboard (framed, it is the API's own origin: a page could have
    # the operator click its cancel button unseen).
    page = wide.http.get("/")
    assert page.status_code == 200 and page.headers["x-frame-options"] == "DENY", page.headers
    assert page.headers["content-security-policy"] == "frame-ancestors 'none'"


async def unreached(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the guard's refusal is asked directly")


def test_listed_hosts_add_to_loopback_names_and_addresses_on_a_wide_bind() -> None:
    """TRM_ALLOWED_HOSTS on a 0.0.0.0 bind with a token: its names are served, and so are the
    health checks that call 127.0.0.1 (they got 421 once the list was set)."""
    guard = BrowserGuard(app=unreached, bind="0.0.0.0", allowed_hosts=["trm.lan"])
    for host in ("trm.lan:8000", "127.0.0.1:8000", "localhost", "[::1]:8000", "10.1.2.3:8000"):
        assert guard.refusal("GET", "/healthz", {"host": host}) is None, host
    refused = guard.refusal("GET", "/healthz", {"host": "other.lan:8000"})
    assert refused is not None and refused[0] == 421
    # Another origin is still refused a state change, even one on the same machine.
    own = {"host": "trm.lan:8000", "content-type": "application/json"}
    assert guard.refusal("POST", "/runs", {**own, "origin": "http://trm.lan:8000"}) is None
    refused = guard.refusal("POST", "/runs", {**own, "origin": "http://127.0.0.1:3000"})
    assert refused is not None and refused[0] == 403


POSTGRES = pytest.mark.parametrize("trained", ["postgres"], indirect=True)


def logged(svc: Service, name: str) -> list[dict[str, Any]]:
    page = svc.http.get(f"/controllers/{name}/decisions", params={"limit": 100})
    assert page.status_code == 200, page.text
    return list(page.json()["decisions"])


@POSTGRES
def test_the_decision_process_refuses_what_a_web_page_sends(trained: Trained) -> None:
    """`trm up` runs the decision process without a token on a loopback port. A page's
    cross-site text/plain post was decided and written to the decision log (rows that push the
    real ones out of TRM_DECISION_LOG_KEEP), and a rebound name could read the answers."""
    svc = trained.svc
    promoted = trained.promote("paged", trained.gbdt, log_decisions=True)
    assert promoted.status_code == 201, promoted.text
    url = svc.env["TRM_DECIDE_URL"]
    port = url.rsplit(":", 1)[1]
    call = json.dumps({"controller": "paged", "rows": [ROW]})
    decider = httpx.Client(base_url=url, timeout=30)
    try:
        simple = decider.post("/decide", content=call, headers={"Content-Type": "text/plain"})
        assert_error(simple, 415, "unsupported_media_type")
        foreign = {"Content-Type": "application/json", "Origin": "https://page.example"}
        assert_error(decider.post("/decide", content=call, headers=foreign), 403)
        rebound = {"Content-Type": "application/json", "Host": f"rebind.example:{port}"}
        assert_error(decider.post("/decide", content=call, headers=rebound), 421)
    finally:
        decider.close()
    assert logged(svc, "paged") == []
    # The API, which calls it by TRM_DECIDE_URL, is answered as before.
    answer = svc.http.post("/controllers/paged/decide", json={"rows": [ROW]})
    assert answer.status_code == 200, answer.text
    assert [d["id"] for d in logged(svc, "paged")] == [answer.json()["decisions"][0]["decision_id"]]


@POSTGRES
def test_unstorable_values_in_decide_rows_and_outcomes_are_422s_naming_the_field(
    trained: Trained,
) -> None:
    """On Postgres a NUL in a decide row reached the decision log's insert (the decision process
    answered 500, the API 502 "without JSON"), and one in an outcome's notes its update (500)."""
    svc = trained.svc
    promoted = trained.promote("nul", trained.gbdt, log_decisions=True)
    assert promoted.status_code == 201, promoted.text
    first = svc.http.post("/controllers/nul/decide", json={"rows": [ROW]})
    assert first.status_code == 200, first.text
    decision = first.json()["decisions"][0]["decision_id"]

    for row, field in (
        ({**ROW, "state": "quarterly\u0000report"}, "rows[0].state"),
        ({**ROW, "tools": ["TRM_ONLY", "LLM\u0000DIRECT"]}, "rows[0].tools[1]"),
    ):
        error = assert_error(
            svc.http.post("/controllers/nul/decide", json={"rows": [row]}), 422, "validation_error"
        )
        assert error["details"][0]["field"] == field, error
        direct = httpx.post(
            f"{svc.env['TRM_DECIDE_URL']}/decide",
            json={"controller": "nul", "rows": [row]},
            timeout=30,
        )
        error = assert_error(direct, 422, "validation_error")
        assert error["details"][0]["field"] == field, error
    notes = {"decision_id": decision, "success": True, "notes": "done\u0000"}
    error = assert_error(
        svc.http.post("/controllers/nul/outcomes", json={"outcomes": [notes]}), 422
    )
    assert error["details"][0]["field"] == "outcomes[0].notes", error
    nan = b'{"min_decisions": 1, "min_agreement": NaN}'
    typed = {"Content-Type": "application/json"}
    answer = svc.http.post("/controllers/nul/promote-shadow", content=nan, headers=typed)
    error = assert_error(answer, 422)
    assert error["details"][0]["field"] == "min_agreement", error
    # Nothing of the refused calls was written; the one decision has no outcome yet.
    rows = logged(svc, "nul")
    assert [(r["id"], r["outcome"]) for r in rows] == [(decision, None)]


def peak_growth(pid: int, call: Callable[[], httpx.Response]) -> tuple[httpx.Response, int]:
    """`call()`'s answer, and how far the process's resident memory rose above where it was
    while the call ran (sampled every 5 ms)."""
    proc = psutil.Process(pid)
    base = proc.memory_info().rss
    peak, done = base, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc.memory_info().rss)
            done.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        answer = call()
    finally:
        done.set()
        sampler.join()
    return answer, peak - base


def logged_row(version: int, state: str) -> DecisionRecord:
    return DecisionRecord(
        id=new_id(),
        name="wide",
        version=version,
        state=state,
        tools=["A", "B"],
        action="A",
        scores=[0.5, 0.5],
        margin=0.0,
        abstain=False,
    )


@POSTGRES
def test_a_page_of_the_decision_log_is_bounded_in_size_not_only_in_rows(trained: Trained) -> None:
    """A decide row may carry 256 KiB of state, and a page 500 rows: a token holder who logged
    such rows made each GET of the log read 128 MiB into the API (and build an answer several
    times that). A page now stops at MAX_PAGE_CHARS; paging on still reads every row once."""
    svc = trained.svc
    assert trained.promote("wide", trained.gbdt, log_decisions=True).status_code == 201
    version = svc.http.get("/controllers/wide").json()["live_version"]
    state = "s" * MAX_STATE_CHARS  # the most a decide row may carry
    engine = make_engine(svc.settings.database_url)
    try:  # the decision process's own writer, as 150 decide calls of two such rows would
        for _ in range(6):
            rows = sorted((logged_row(version, state) for _ in range(50)), key=lambda r: r.id)
            record(engine, rows)
    finally:
        engine.dispose()
    assert svc.api is not None

    def first_page() -> httpx.Response:
        return svc.http.get("/controllers/wide/decisions", params={"limit": MAX_PAGE})

    answer, grew = peak_growth(svc.api.pid, first_page)
    assert answer.status_code == 200, answer.text[:300]
    page = answer.json()
    assert 1 <= len(page["decisions"]) <= MAX_PAGE_CHARS // MAX_STATE_CHARS, len(page["decisions"])
    assert page["next_before"] == page["decisions"][-1]["id"]
    assert grew < 64 * 1024 * 1024, f"the API grew {grew / 2**20:.0f} MiB for one page"
    seen = [d["id"] for d in page["decisions"]]
    while page["next_before"]:
        page = svc.http.get(
            "/controllers/wide/decisions",
            params={"limit": MAX_PAGE, "before": page["next_before"]},
        ).json()
        seen += [d["id"] for d in page["decisions"]]
    assert len(seen) == len(set(seen)) == 300 and seen == sorted(seen, reverse=True)


@pytest.mark.parametrize(
    "bind", ["0.0.0.0", "::", "[::]", "192.0.2.2", "fd00::2", "127.0.0.2", "0:0:0:0:0:0:0:1"]
)
def test_trm_mcp_http_beyond_the_loopback_names_will_not_serve_without_a_token(bind: str) -> None:
    """Every bind but the loopback names (a wildcard of either family, a LAN address, another
    loopback address, the long spelling of ::1) needs TRM_API_TOKEN, which callers then send."""
    with pytest.raises(HttpRefused, match="TRM_API_TOKEN"):
        required_token(bind, None)
    assert required_token(bind, "s3cret") == "s3cret"
    for loopback in ("127.0.0.1", "localhost", "::1", "[::1]"):
        assert required_token(loopback, None) is None
