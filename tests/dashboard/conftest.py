"""Browser fixtures: a real API (SQLite) and workers, Debian's Chromium driven by Playwright, and
a TCP proxy between them that a test can cut to drop the page's connections."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Service, TcpProxy

CHROMIUM = os.environ.get("TRM_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if shutil.which(CHROMIUM) is None:
        skip = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")
        for item in items:
            if "tests/dashboard" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture
def proxy(service: Service) -> Iterator[TcpProxy]:
    relay = TcpProxy(("127.0.0.1", service.port))
    relay.restore()
    yield relay
    relay.cut()


@pytest.fixture(scope="session")
def playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def browser(playwright: Any) -> Iterator[Any]:
    """One Chromium for the session's pages (a start is seconds of CPU on the test cores)."""
    chromium = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
    )
    yield chromium
    chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context per test (its own cookies, storage and cache, as a new profile);
    console errors are kept for the assertion message."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    tab.errors = []
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    yield tab
    context.close()


def screenshot(page: Any, name: str, tmp_path: Path) -> Path:
    """Next to the test's files, to look at when a test fails. The docs' images come from real
    runs instead: scripts/screenshots.py."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    return path
