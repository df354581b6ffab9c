"""The rest of the integrity probe: a client's Idempotency-Key cannot take a search's candidate
key; a webhook host is called only when listed, at the address that was checked; a mistyped
field of a bench dry run is a 422, not a 500."""

from __future__ import annotations

import pytest

from core.db import get_engine
from core.events import Publisher
from core.notify import NotifyConfig, Resolver, deliver, pin, url_refusal
from core.runs import submit_run
from core.settings import Settings
from tests.conftest import Service
from tests.deploy.conftest import Receiver
from tests.deploy.conftest import receiver as receiver  # noqa: F401 - the fixture
from worker.hillclimb.launch import ServiceLauncher


def selftest(name: str) -> dict[str, object]:
    return {"kind": "selftest", "steps": 1, "step_seconds": 0, "name": name}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_client_key_shaped_like_a_candidate_key_does_not_fail_the_search(
    service: Service, settings: Settings
) -> None:
    search = service.submit(selftest("stands in for the search"))
    taken = service.submit(selftest("client"), **{"Idempotency-Key": f"{search['id']}:c000"})
    launcher = ServiceLauncher(
        Publisher(get_engine(settings), None, settings), settings, search["id"]
    )
    candidate = launcher.launch("c000", selftest("candidate"))
    assert candidate != taken["id"]
    again = launcher.launch("c000", selftest("candidate"))  # a resumed search finds its own
    assert again == candidate
    shown = service.run(candidate)
    assert shown["parent_id"] == search["id"] and shown["name"] == "candidate"
    reserved = service.http.post(
        "/runs",
        json=selftest("sneaky"),
        headers={"Idempotency-Key": f"trm-internal/{search['id']}:c001"},
    )
    assert reserved.status_code == 422, reserved.text
    assert reserved.json()["error"]["details"][0]["field"] == "Idempotency-Key"


@pytest.mark.parametrize("host", ["localhost.localdomain", "ip6-localhost", "localhost"])
def test_a_loopback_sounding_name_is_called_only_when_listed(host: str) -> None:
    refusal = url_refusal(f"http://{host}:9/hook", ())
    assert refusal is not None and "not allowed" in refusal
    assert url_refusal(f"http://{host}:9/hook", (host,)) is None


def test_a_name_resolving_off_loopback_is_never_called(
    migrated: Settings, receiver: Receiver
) -> None:
    publisher = Publisher(get_engine(migrated), None, migrated)
    run, _ = submit_run(publisher, migrated, selftest("notified"), None, queue=False)
    port = receiver.url.split(":")[2].split("/")[0]
    config = NotifyConfig(attempts=1, allow=("localhost",))
    listed = NotifyConfig(attempts=1, allow=("hooks.test",))
    hooks_url = f"http://hooks.test:{port}/hook"

    def hosts(table: dict[str, str]) -> Resolver:  # what a resolver (or a rebinding DNS) says
        return lambda host, _port: [table[host]] if host in table else []

    # Unlisted, spelled like loopback, resolving elsewhere: refused, nothing is sent.
    elsewhere = hosts({"localhost.localdomain": "10.20.30.40"})
    url = f"http://localhost.localdomain:{port}/hook"
    assert not deliver(publisher, run.id, url, {}, config, resolve=elsewhere)
    # A listed name resolving to the metadata service's link-local address: refused too.
    metadata = hosts({"hooks.test": "169.254.169.254"})
    assert not deliver(publisher, run.id, hooks_url, {}, listed, resolve=metadata)
    assert receiver.received == []
    refusals = [e["error"] for e in publisher.run_events(run.id, "log")]
    assert "not allowed" in refusals[0] and "link-local" in refusals[1], refusals
    # A listed name is called at the address that was checked, under its own Host header.
    pinned = hosts({"hooks.test": "127.0.0.1"})
    assert deliver(publisher, run.id, hooks_url, {"run_id": run.id}, listed, resolve=pinned)
    assert [r["headers"]["Host"] for r in receiver.received] == [f"hooks.test:{port}"]


# (dry-run fields, the field its 422 names): all on one service.
MISTYPED = [
    ({"router": 5}, "router"),
    ({"baseline": ["a"]}, "baseline"),
    ({"repeats": "many"}, "repeats"),
    ({"trainer": 3}, "trainer"),
]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_mistyped_bench_dry_run_field_is_a_422_naming_it(service: Service) -> None:
    for fields, field in MISTYPED:
        answer = service.http.post("/benches/routerbench", params={"dry_run": "true"}, json=fields)
        assert answer.status_code == 422, (fields, answer.text)
        assert answer.json()["error"]["details"][0]["field"] == field, (fields, answer.text)


@pytest.mark.parametrize(
    "address", ["100.64.0.1", "::ffff:100.100.1.2", "198.18.0.1", "127.0.0.1", "fd00::1"]
)
def test_a_wildcard_name_resolving_to_a_non_public_address_is_never_called(address: str) -> None:
    """100.64.0.0/10 (carrier-grade NAT, where a tailnet's machines answer) is neither loopback
    nor private to Python's `ipaddress`: a name under a wildcard entry resolving there was
    called. Listed by itself, the address is called."""
    refused = pin("http://a.hooks.test/hook", ("*.hooks.test",), lambda _host, _port: [address])
    assert isinstance(refused, str) and "non-public" in refused, refused
    shown = f"[{address}]" if ":" in address else address
    called = pin(f"http://{shown}/hook", (address,), lambda _host, _port: [address])
    assert not isinstance(called, str), called
    public = pin("http://a.hooks.test/hook", ("*.hooks.test",), lambda _h, _p: ["93.184.216.34"])
    assert not isinstance(public, str), public
