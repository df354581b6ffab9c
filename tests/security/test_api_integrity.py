"""The API side's integrity, attack by attack: a skill spec naming a huge file, a webhook host
that resolves slowly, webhooks probing the service's own ports, over-long path parts, and
terminal escape codes in the strings a client chose. Each test sends what an attacker would."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import Session

from app.cli import main as trm
from app.intake import Intake
from core.card import WIDTH, Card, render_text
from core.db import get_engine, make_engine
from core.events import Publisher
from core.models import Run
from core.notify import NotifyConfig, deliver
from core.redisconn import sync_redis
from core.runstate import set_status
from core.settings import Settings
from tests.conftest import Service, run_async
from tests.deploy.conftest import Receiver
from tests.deploy.conftest import receiver as receiver  # noqa: F401 - the fixture
from tests.security.test_hostile import assert_error
from tests.stack import free_port

SHARED = pytest.mark.parametrize("shared_service", ["sqlite"], indirect=True)
SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
DRY = {"kind": "selftest", "dry_run": True}
LONG = "n" * 300  # over NAME_MAX (255 bytes)
DEEP = "/".join(["d" * 200] * 30)  # over PATH_MAX (4096 bytes)
ESC = "\x1b]0;owned\x07\x1b[2J\x1b[31m"  # retitle the terminal, clear it, paint it red


def dry_run(service: Service) -> str:
    return str(service.submit(DRY)["id"])


@SHARED
def test_a_skill_spec_naming_a_huge_file_gets_a_413_without_reading_it(
    shared_service: Service,
) -> None:
    data_dir = shared_service.settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    huge = data_dir / "huge-corpus.json"
    with huge.open("wb") as file:  # sparse: 64 MiB that take no disk
        file.truncate(64 * 1024 * 1024)
    spec = {"mutations": {}, "corpus_spec": huge.name}
    started = time.monotonic()
    error = assert_error(
        shared_service.http.post("/runs", params={"format": "skill"}, json=spec),
        413,
        "payload_too_large",
    )
    limit = shared_service.settings.max_body_bytes  # bounded like a body
    assert str(limit) in error["message"] and "corpus_spec" in error["message"]
    assert time.monotonic() - started < 5
    # A spec file under the limit is still read and translated.
    small = data_dir / "small-corpus.json"
    small.write_text('{"sources": [], "dedupe": true}')
    answer = shared_service.http.post(
        "/runs", params={"format": "skill"}, json={"mutations": {}, "corpus_spec": small.name}
    )
    assert answer.status_code == 422 and "sources: empty" in answer.text, answer.text


@pytest.fixture
def publisher(migrated: Settings) -> Iterator[Publisher]:
    engine = make_engine(migrated.database_url)
    yield Publisher(engine, sync_redis(migrated), migrated)
    engine.dispose()


@SQLITE
def test_a_slowly_resolving_webhook_host_does_not_delay_other_submissions(
    publisher: Publisher, migrated: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The system resolver, made slow for names under `slow.test` (as a stalled DNS server
    would be); no network is needed. Submitting never looks a webhook host up: an unlisted name
    is refused by its spelling, a listed one accepted, and every other submission of the batch
    is answered at once."""
    lookups: list[str] = []
    resolve = socket.getaddrinfo

    def slow_resolver(host: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host).endswith("slow.test"):
            lookups.append(str(host))
            time.sleep(5)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow_resolver)
    settings = migrated.model_copy(update={"notify_allow": "hooks.slow.test"})
    intake = Intake(publisher, settings)
    hooked = [
        DRY | {"name": f"probe{i}", "notify": {"url": f"http://h{i}.slow.test/x"}} for i in range(3)
    ]
    listed = DRY | {"name": "listed", "notify": {"url": "http://hooks.slow.test/x"}}
    plain = [DRY | {"name": f"plain{i}"} for i in range(8)]

    async def submit_all() -> list[tuple[Any, float]]:
        intake.start()
        began = time.monotonic()

        async def one(body: dict[str, Any]) -> tuple[Any, float]:
            try:
                answer: Any = await intake.submit(body, None)
            except Exception as exc:
                answer = exc
            return answer, time.monotonic() - began

        try:
            return await asyncio.gather(*(one(b) for b in [*hooked, listed, *plain]))
        finally:
            await intake.stop()

    answers = run_async(submit_all())
    assert lookups == []
    for refused, _ in answers[:3]:
        assert getattr(refused, "status", None) == 422, refused
        assert "not allowed" in refused.message
    accepted = answers[3:]
    assert all(isinstance(a, tuple) and a[1] for a, _ in accepted), accepted
    assert max(seconds for _, seconds in answers) < 4, answers  # below one slow lookup


@SHARED
def test_a_webhook_cannot_reach_the_services_own_ports(shared_service: Service) -> None:
    port = shared_service.url.rsplit(":", 1)[1].rstrip("/")
    for url in (
        f"http://127.0.0.1:{port}/runs?limit=1",
        f"http://localhost:{port}/healthz",
        f"http://[::1]:{port}/",
        "http://127.0.0.1:6379/",
    ):
        error = assert_error(
            shared_service.http.post("/runs", json=DRY | {"notify": {"url": url}}), 422
        )
        assert error["details"][0]["field"] == "notify.url", (url, error)
        assert "TRM_NOTIFY_ALLOW" in error["message"]


@SHARED
def test_a_failed_delivery_says_nothing_of_the_port_it_met(
    shared_service: Service, receiver: Receiver
) -> None:
    """Even to a listed host: a closed port, a 404 and a 500 read the same in the events, so no
    client learns what answers where; only a delivery says its status code."""
    settings = shared_service.settings
    publisher = Publisher(get_engine(settings), None, settings)
    run_id = dry_run(shared_service)
    config = NotifyConfig(allow=("127.0.0.1",), attempts=1)
    closed = f"http://127.0.0.1:{free_port()}/x"
    receiver.answers = [404, 500]
    for url in (closed, receiver.url, receiver.url):
        assert not deliver(publisher, run_id, url, {"run_id": run_id}, config, lambda _: None)
    assert deliver(publisher, run_id, receiver.url, {"run_id": run_id}, config, lambda _: None)
    records = [e for e in publisher.run_events(run_id, "log") if e.get("source") == "notify"]
    failed, delivered = records[:3], records[3]
    for record in failed:
        assert record["status_code"] is None and "error" not in record, record
        # the url (its random port may read "500") is what the client sent, not what it met
        text = repr({k: v for k, v in record.items() if k != "url"}).replace(record["url"], "URL")
        for detail in ("404", "500", "refused", "Errno", "Connect"):
            assert detail not in text, (detail, record)
    assert {r["message"].split(" to ")[0] for r in failed} == {"webhook not delivered"}
    assert delivered["delivered"] and delivered["status_code"] == 200


@SHARED
def test_over_long_paths_are_404_or_422_never_5xx(shared_service: Service) -> None:
    http = shared_service.http
    run_id = dry_run(shared_service)
    for path in (LONG, DEEP, f"trainer/{LONG}/model.json"):
        assert_error(http.get(f"/runs/{run_id}/artifacts/{path}"), 404, "not_found")
    for fields in ({"router": LONG}, {"baseline": DEEP}, {"results_jsonl": f"{LONG}.jsonl"}):
        answer = http.post("/benches/routerbench", params={"dry_run": "true"}, json=fields)
        assert answer.status_code in (404, 422), (fields, answer.status_code, answer.text[:300])
        assert_error(answer, answer.status_code)
    for spec in (
        {"mutations": {}, "corpus_spec": LONG},
        {"mutations": {}, "corpus_spec": DEEP},
        {"train_hparams": {}, "source_jsonl": LONG},
        {"train_hparams": {}, "sources": 5},
        {"train_hparams": {}, "sources": {"path": "x"}},
        {"mutations": {}, "base": {"kind": "train", "corpus": {"sources": 7}}},
    ):
        answer = http.post("/runs", params={"format": "skill"}, json=spec)
        assert_error(answer, 422, "validation_error")


def test_the_card_escapes_control_characters_and_stays_ascii() -> None:
    card = Card(
        run_id="01ARZ3NDEKTSV4RRFFQ69G5FAV",
        kind="train",
        phase=f"train{ESC}",
        data_source=f"{ESC}rows\u202eevil",
        best_candidate=f"c1{ESC}",
        trainer="trm",
    )
    text = render_text(card)
    lines = text.splitlines()
    assert len(lines) == 7 and all(len(line) == WIDTH and line.isascii() for line in lines)
    assert all(ch == "\n" or " " <= ch <= "~" for ch in text), repr(text)
    assert "\\x1b]0;owned" in text  # shown, escaped, not acted on


@SHARED
def test_trm_show_and_watch_print_no_escape_codes(
    shared_service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose name, card and failure reason carry escape codes (as a hostile source name
    or a reason echoing client input would), read back through the CLI."""
    settings = shared_service.settings
    run_id = str(shared_service.submit(DRY | {"name": f"run{ESC}"})["id"])
    publisher = Publisher(get_engine(settings), None, settings)
    with publisher.transaction() as tx:
        run = tx.session.get(Run, run_id)
        assert run is not None
        card = {"phase": "prepare_corpus", "data_source": f"src{ESC}"}
        reason = f"source {ESC!r} unreadable{ESC}"
        assert set_status(
            tx, run, "failed", failure_class="bad_input", failure_reason=reason, card=card
        )
    with Session(publisher.engine) as session:
        assert (session.get(Run, run_id) or Run()).failure_reason == reason
    url = ["--url", shared_service.url]
    assert trm(["show", run_id, *url]) == 0
    assert trm(["watch", run_id, "--once", *url]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b[2J" in out and "failure bad_input" in out
    assert "src\\x1b" in out  # the card's data source, escaped
