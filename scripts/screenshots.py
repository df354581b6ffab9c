"""Regenerates the dashboard screenshots in docs/screenshots/ from a real service: `trm up` in a
scratch folder, a small train run on the example ticket log, a routerBench bench that trains its
own small router, and a hill-climb on the ticket log; then Chromium (Debian's /usr/bin/chromium,
driven by Playwright as in tests/dashboard) saves the runs list, each run's page and the submit
form at 1280 px and at a phone's 390 px.

    .venv/bin/python scripts/screenshots.py            # about five minutes on 2 busy cores

Each image is `<page>.png` (1280 px) and `<page>-phone.png` (390 px), cut at a height that keeps
it small.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
EXAMPLES = ROOT / "docs" / "examples"
CHROMIUM = os.environ.get("TRM_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
# (suffix, viewport width, viewport height, the most height kept)
SIZES = (("", 1280, 800, 1700), ("-phone", 390, 844, 2600))
# A routerBench bench with a router small enough to train in under a minute.
BENCH = {
    "kind": "bench",
    "name": "routerBench, a small router",
    "bench": "routerbench",
    "router": "train",
    "router_train": {"epochs": 6},
    "episodes": 4,
    "train_sample": 200,
}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_service(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`trm up` in `folder` (SQLite and an embedded Redis under its ./var), on a free port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    env.update(
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRM_API_PORT=str(port),
        TRM_DECIDE_PORT=str(free_port()),
    )
    log = open(folder / "trm-up.log", "wb")  # noqa: SIM115 - kept open for the process's life
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "up"],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"trm up exited; see {folder / 'trm-up.log'}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return proc, url
        time.sleep(0.5)
    raise RuntimeError(f"trm up did not get ready in 120 s; see {folder / 'trm-up.log'}")


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: trm up stops the API, worker, decision process and Redis it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def submit(client: httpx.Client, spec: dict[str, Any]) -> str:
    response = client.post("/runs", json=spec)
    response.raise_for_status()
    return str(response.json()["id"])


def wait_done(client: httpx.Client, run_ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    left = set(run_ids)
    while left and time.monotonic() < deadline:
        for run_id in sorted(left):
            status = client.get(f"/runs/{run_id}").json()["status"]
            if status in {"failed", "cancelled"}:
                raise RuntimeError(f"run {run_id} ended {status}")
            if status == "completed":
                left.discard(run_id)
        time.sleep(2)
    if left:
        raise RuntimeError(f"runs not done after {timeout:.0f} s: {sorted(left)}")


def shoot(url: str, runs: dict[str, str], out: Path) -> list[Path]:
    """Each page at each size; a page is saved once what it shows has been drawn."""
    from playwright.sync_api import sync_playwright

    pages = [
        ("runs-list", "#/", "#runs-table tbody tr"),
        ("run-page", f"#/runs/{runs['train']}", "#run-scorecard-box:not([hidden])"),
        ("bench-page", f"#/runs/{runs['bench']}", "#run-scorecard-box:not([hidden])"),
        ("hillclimb-page", f"#/runs/{runs['hillclimb']}", "svg.hillclimb .point"),
        ("submit-form", "#/submit", "#submit-form"),
    ]
    saved = []
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for suffix, width, height, keep in SIZES:
                context = browser.new_context(viewport={"width": width, "height": height})
                page = context.new_page()
                page.set_default_timeout(30_000)
                for name, route, ready in pages:
                    page.goto(f"{url}/{route}")
                    page.wait_for_selector(ready)
                    if route.startswith("#/runs/"):
                        page.wait_for_selector("#run-status.status.completed")
                    page.wait_for_load_state("networkidle")
                    full = page.evaluate("document.documentElement.scrollHeight")
                    clip = {"x": 0, "y": 0, "width": width, "height": min(int(full), keep)}
                    path = out / f"{name}{suffix}.png"
                    page.screenshot(path=str(path), full_page=True, clip=clip)
                    saved.append(path)
                context.close()
        finally:
            browser.close()
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where the images go")
    args = parser.parse_args(argv)
    spec = importlib.util.spec_from_file_location("tickets", EXAMPLES / "tickets.py")
    assert spec and spec.loader
    tickets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tickets)

    with tempfile.TemporaryDirectory(prefix="trm-screenshots-") as tmp:
        folder = Path(tmp)
        data = folder / "var" / "data"
        tickets.main(data / "tickets" / "logs.jsonl")
        proc, url = start_service(folder)
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                train = json.loads((EXAMPLES / "train-tickets.json").read_text())
                search = json.loads((EXAMPLES / "hillclimb-tickets.json").read_text())
                runs = {
                    "train": submit(client, train),
                    "bench": submit(client, BENCH),
                    "hillclimb": submit(client, search),
                }
                print(f"service at {url}; runs {runs}", flush=True)
                wait_done(client, list(runs.values()), timeout=1500)
            for path in shoot(url, runs, args.out):
                print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
        finally:
            stop_service(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
