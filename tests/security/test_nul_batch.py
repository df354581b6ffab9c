"""One bad submission fails only itself. On Postgres a `\\u0000` in a spec string made the API's
group commit raise, and 18-29 of 40 innocent POSTs that arrived with it got 500 and were never
recorded. Values no database can store are refused at validation with a 422 naming the field, and
a batch the database refuses is recorded one run at a time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from core.settings import Settings
from tests.conftest import Service, run_async

CROWD = 40


def spec(i: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "selftest", "steps": 1, "step_seconds": 0, "name": f"crowd-{i}", **extra}


async def post_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    """Every body at once, so the API's intake writes them in the same batches."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        headers = {"Content-Type": "application/json"}
        return list(
            await asyncio.gather(
                *(client.post("/runs", content=b, headers=headers) for b in bodies)
            )
        )


def recorded_names(service: Service) -> set[str]:
    runs = service.http.get("/runs", params={"limit": 500}).json()["runs"]
    return {run["name"] for run in runs}


def test_nul_in_a_nested_spec_string_fails_only_its_own_post(service: Service) -> None:
    bad = 17
    bodies = [
        json.dumps(
            spec(i, notify={"url": "http://localhost:9/hook\u0000"}) if i == bad else spec(i)
        ).encode()
        for i in range(CROWD)
    ]
    answers = run_async(post_all(service.url, bodies))
    refused = answers[bad]
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "validation_error" and error["details"][0]["field"] == "notify.url"
    assert "NUL" in error["message"]
    others = [a.status_code for i, a in enumerate(answers) if i != bad]
    assert others == [202] * (CROWD - 1), others
    assert recorded_names(service) == {f"crowd-{i}" for i in range(CROWD) if i != bad}


# (body, the field its 422 names): all on one service (an API start per case cost more than it).
UNSTORABLE = [
    (b'{"kind": "selftest", "name": "a\\u0000b"}', "name"),
    (b'{"kind": "selftest", "name": "\\ud800"}', "name"),
    (b'{"kind": "selftest", "steps": 18446744073709551616}', "steps"),
    (b'{"kind": "selftest", "step_seconds": NaN}', "step_seconds"),
    (b'{"kind": "selftest", "notify": {"url\\u0000": 1}}', "notify"),
]


@pytest.mark.parametrize("shared_service", ["postgres"], indirect=True)
def test_unstorable_values_get_a_422_naming_the_field(shared_service: Service) -> None:
    service = shared_service  # nothing is recorded: one API for this test and the next
    for raw, field in UNSTORABLE:
        answer = service.http.post(
            "/runs", content=raw, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 422, (raw, answer.text)
        assert answer.json()["error"]["details"][0]["field"] == field, (raw, answer.text)


@pytest.mark.parametrize("shared_service", ["postgres"], indirect=True)
def test_nul_in_a_query_or_path_parameter_gets_a_422_not_a_500(shared_service: Service) -> None:
    service = shared_service
    for path, params in [("/runs", {"kind": "a\x00"}), ("/runs/a%00b", {})]:
        answer = service.http.get(path, params=params)
        assert answer.status_code == 422, (path, answer.text)
        assert answer.json()["error"]["details"][0]["field"] in ("query.kind", "path.run_id")


def poison_inserts(settings: Settings) -> None:
    """Make the database itself refuse the run named `poison` (a row that passes validation)."""
    engine = sa.create_engine(settings.database_url)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(
                "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
                "IF NEW.name = 'poison' THEN "
                "RAISE EXCEPTION 'poisoned row' USING ERRCODE = '22023'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER poison BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION poison()"
            )
        else:
            conn.exec_driver_sql(
                "CREATE TRIGGER poison BEFORE INSERT ON runs WHEN NEW.name = 'poison' "
                "BEGIN SELECT RAISE(ABORT, 'poisoned row'); END"
            )
    engine.dispose()


def test_a_row_the_database_refuses_fails_only_its_own_post(
    service: Service, settings: Settings
) -> None:
    poison_inserts(settings)
    bad = 23
    bodies = [
        json.dumps(spec(i) | ({"name": "poison"} if i == bad else {})).encode()
        for i in range(CROWD)
    ]
    answers = run_async(post_all(service.url, bodies))
    assert answers[bad].status_code != 202, answers[bad].text
    others = [a.status_code for i, a in enumerate(answers) if i != bad]
    assert others == [202] * (CROWD - 1), others
    assert recorded_names(service) == {f"crowd-{i}" for i in range(CROWD) if i != bad}
