"""Uploads nobody should be able to keep: paths that leave the data set, links, bombs, a wrong
checksum, an over-size body, a foreign content type, no token, another site. Each is refused with
the status and message that says what to fix, and leaves nothing under DATA_DIR/datasets. A real
API (SQLite: the database plays no part here) with small limits and a token."""

from __future__ import annotations

import gzip
import io
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import QUICK, Service
from tests.datasets.archives import ROW, left_behind, member, push, sha, tar_with, zip_with
from tests.stack import Scratch, create_database

TOKEN = "data-s3cret"
LIMITS = {
    "TRM_MAX_DATASET_BYTES": "200000",
    "TRM_MAX_DATASET_FILES": "50",
    "TRM_MAX_DATASET_UNPACKED_BYTES": "1000000",
}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("hostile-uploads")
    scratch = Scratch(root, create_database("sqlite", root))
    scratch.migrate()
    svc = Service({**scratch.env, **QUICK, **LIMITS, "TRM_API_TOKEN": TOKEN}, root / "logs")
    svc.http.headers["Authorization"] = f"Bearer {TOKEN}"
    svc.start_api()
    yield svc
    svc.stop()
    scratch.drop()


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, (response.status_code, response.text[:500])
    error = response.json()["error"]
    assert error["code"] == code, error
    return str(error["message"])


LINK = tarfile.SYMTYPE
HOSTILE_TARS = {
    "dotdot": ([member("logs/../../x.jsonl")], "'..' part"),
    "absolute": ([member("/etc/x.jsonl")], "absolute path"),
    "symlink": ([member("rows.jsonl", type=LINK, linkname="/etc/passwd")], "link"),
    "hardlink": ([member("rows.jsonl", type=tarfile.LNKTYPE, linkname="a")], "link"),
    "device": ([member("dev", type=tarfile.CHRTYPE)], "device"),
    "odd name": ([member("logs/rows$(rm).jsonl")], "character outside"),
    "twice": ([member("a.jsonl"), member("a.jsonl")], "appears twice"),
    "newline": ([member("logs/a.jsonl\n")], "character outside"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TARS))
def test_a_tar_member_that_could_leave_the_data_set_is_refused_and_nothing_is_kept(
    guarded: Service, case: str
) -> None:
    members, why = HOSTILE_TARS[case]
    body = tar_with([member("ok/fine.jsonl"), *members])
    message = refused(push(guarded.http, "hostile", body), 422, "unsafe_member")
    assert why in message, message
    assert left_behind(guarded.settings, "hostile") == []


def test_bombs_many_members_or_huge_sizes_stop_at_the_limits(guarded: Service) -> None:
    many = zip_with({f"r{i}.jsonl": ROW for i in range(60)})
    assert "TRM_MAX_DATASET_FILES" in refused(
        push(guarded.http, "bomb", many), 413, "too_many_files"
    )
    # An end record that says 1 member in front of a directory of 60: the directory is counted.
    lying = bytearray(many)
    end = lying.rfind(b"PK\x05\x06")
    lying[end + 8 : end + 12] = (1).to_bytes(2, "little") * 2
    assert len(zipfile.ZipFile(io.BytesIO(bytes(lying))).infolist()) == 60
    refused(push(guarded.http, "bomb", bytes(lying)), 413, "too_many_files")
    inflating = zip_with({"zeros.jsonl": b"\n" * 5_000_000})
    assert len(inflating) < 200_000
    message = refused(push(guarded.http, "bomb", inflating), 413, "unpacked_too_large")
    assert "TRM_MAX_DATASET_UNPACKED_BYTES" in message
    info = tarfile.TarInfo("huge.jsonl")
    info.size = 10**12  # a header that promises a terabyte; the body holds nothing of it
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    refused(push(guarded.http, "bomb", header + b"\0" * 1024), 413, "unpacked_too_large")
    assert left_behind(guarded.settings, "bomb") == []


def test_a_wrong_checksum_a_big_body_and_a_foreign_type_are_refused(guarded: Service) -> None:
    body = tar_with([member("rows.jsonl")])
    message = refused(
        push(guarded.http, "bad", body, digest=sha(b"other")), 422, "checksum_mismatch"
    )
    assert sha(body) in message
    missing = guarded.http.put("/datasets/bad", content=body)
    assert "X-Content-SHA256" in refused(missing, 400, "checksum_required")
    big = b"{}\n" * 100_000
    assert "TRM_MAX_DATASET_BYTES" in refused(
        push(guarded.http, "bad", big), 413, "payload_too_large"
    )

    def chunks() -> Iterator[bytes]:  # no Content-Length: the running count stops it
        for _ in range(100):
            yield b"{}\n" * 1000

    streamed = guarded.http.put(
        "/datasets/bad", content=chunks(), headers={"X-Content-SHA256": sha(big)}
    )
    refused(streamed, 413, "payload_too_large")
    typed = guarded.http.put(
        "/datasets/bad",
        content=body,
        headers={"X-Content-SHA256": sha(body), "Content-Type": "text/plain"},
    )
    refused(typed, 415, "unsupported_media_type")
    garbage = b"\x00\x01 not an archive"
    refused(push(guarded.http, "bad", garbage), 422, "unknown_format")
    refused(push(guarded.http, "Bad..Name!", body), 422, "validation_error")
    refused(push(guarded.http, "bad%0A", body), 422, "validation_error")
    assert left_behind(guarded.settings, "bad") == []


def test_no_token_or_another_sites_page_uploads_nothing(guarded: Service) -> None:
    body = tar_with([member("rows.jsonl")])
    headers = {"X-Content-SHA256": sha(body)}
    anonymous = httpx.put(f"{guarded.url}/datasets/sneaky", content=body, headers=headers)
    refused(anonymous, 401, "unauthorized")
    cross = push(guarded.http, "sneaky", body)
    assert cross.status_code == 201  # the same call from the API's own client is fine
    assert guarded.http.delete("/datasets/sneaky").status_code == 200
    site = guarded.http.put(
        "/datasets/sneaky", content=body, headers={**headers, "Origin": "https://evil.example"}
    )
    refused(site, 403, "forbidden_origin")
    assert left_behind(guarded.settings, "sneaky") == []


def test_hidden_files_are_skipped_and_listed_and_folders_keep_their_shape(
    guarded: Service, tmp_path: Path
) -> None:
    body = zip_with(
        {
            "__MACOSX/._a.jsonl": b"x",
            "logs/.DS_Store": b"x",
            "logs/a.jsonl": ROW,
            "logs/deep/b.jsonl": ROW,
            ".dataset.json": b"{}",
        }
    )
    answer = push(guarded.http, "shaped", body)
    assert answer.status_code == 201, answer.text
    meta = answer.json()["dataset"]
    assert meta["files"] == 2 and meta["created_by"] == "token"
    assert sorted(meta["skipped"]) == [".dataset.json", "__MACOSX/._a.jsonl", "logs/.DS_Store"]
    folder = guarded.settings.data_dir / "datasets" / "shaped"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.jsonl")) == [
        "logs/a.jsonl",
        "logs/deep/b.jsonl",
    ]
    sources = answer.json()["show"]["sources"]
    assert [(s["type"], s["path"]) for s in sources] == [("jsonl", "logs"), ("jsonl", "logs/deep")]
    assert guarded.http.delete("/datasets/shaped").status_code == 200


def zip_link(name: str, target: bytes) -> bytes:
    """A zip whose member is a symlink (Unix mode in its external attributes), as `zip -y`
    writes one."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo(name)
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, target)
    return buffer.getvalue()


def test_a_zip_member_that_leaves_or_links_out_is_refused_like_a_tars(guarded: Service) -> None:
    for body, why in (
        (zip_with({"ok.jsonl": ROW, "../../escape.jsonl": ROW}), "'..' part"),
        (zip_with({"/abs/x.jsonl": ROW}), "absolute path"),
        (zip_with({"a\\..\\x.jsonl": ROW}), "backslash"),
        (zip_link("rows.jsonl", b"/etc/passwd"), "link"),
    ):
        message = refused(push(guarded.http, "zipped", body), 422, "unsafe_member")
        assert why in message, message
    assert left_behind(guarded.settings, "zipped") == []
    assert not (guarded.settings.data_dir.parent / "escape.jsonl").exists()


def test_show_bounds_its_reading_and_says_so(guarded: Service) -> None:
    """Over 200,000 lines: the show stops, says its counts are lower bounds, marks the file."""
    many = b"{}\n" * 210_000
    body = tar_with([member("rows/many.jsonl", data=many)])
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb") as gz:
        gz.write(body)
    answer = push(guarded.http, "long", packed.getvalue())
    assert answer.status_code == 201, answer.text
    view = guarded.http.get("/datasets/long").json()
    assert view["complete"] is False and "lower bounds" in view["note"]
    assert view["files"][0]["read"] == "part" and view["files"][0]["rows"] == 200_000
    assert guarded.http.delete("/datasets/long").status_code == 200


def test_an_upload_that_would_leave_the_disk_short_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """TRM_MIN_FREE_BYTES over the disk's free space: every upload is a 507 naming both."""
    root = tmp_path_factory.mktemp("full-disk")
    scratch = Scratch(root, create_database("sqlite", root))
    scratch.migrate()
    svc = Service({**scratch.env, **QUICK, "TRM_MIN_FREE_BYTES": str(10**18)}, root / "logs")
    svc.start_api()
    try:
        body = tar_with([member("rows.jsonl")])
        message = refused(push(svc.http, "full", body), 507, "disk_full")
        assert "TRM_MIN_FREE_BYTES" in message and str(svc.settings.data_dir) in message
        assert left_behind(svc.settings, "full") == []
    finally:
        svc.stop()
        scratch.drop()


def test_data_sets_together_stay_under_their_quota_and_a_replacement_counts_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """TRM_MAX_DATASETS_BYTES bounds what every data set holds together: the upload that would
    pass it is a 507 naming the setting, keeps nothing, and fits again once one is removed."""
    root = tmp_path_factory.mktemp("datasets-quota")
    scratch = Scratch(root, create_database("sqlite", root))
    scratch.migrate()
    svc = Service({**scratch.env, **QUICK, "TRM_MAX_DATASETS_BYTES": "25000"}, root / "logs")
    svc.start_api()
    try:
        body = tar_with([member("rows.jsonl", data=ROW * (10_000 // len(ROW)))])
        for name in ("first", "second"):
            assert push(svc.http, name, body).status_code == 201
        held = sum(d["unpacked_bytes"] for d in svc.http.get("/datasets").json()["datasets"])
        assert 20_000 - 2 * len(ROW) < held <= 20_000
        message = refused(push(svc.http, "third", body), 507, "quota_exceeded")
        assert "TRM_MAX_DATASETS_BYTES" in message and f"hold {held} bytes" in message
        assert left_behind(svc.settings, "third") == []
        # A replacement counts the data set once: its old bytes make way for its new ones.
        again = push(svc.http, "first", body, replace="true")
        assert again.status_code == 201, again.text
        assert svc.http.delete("/datasets/second").status_code == 200
        assert push(svc.http, "third", body).status_code == 201
        names = [d["name"] for d in svc.http.get("/datasets").json()["datasets"]]
        assert names == ["first", "third"]
    finally:
        svc.stop()
        scratch.drop()
