"""Fault fixtures: a private Redis server we may kill, a TCP proxy in front of Postgres we may
cut, and a tiny tmpfs to fill. The shared Redis and Postgres servers are never touched."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TcpProxy, free_port, wait_for


class RedisServer:
    """`redis-server` on a free port, no persistence: a restart comes back empty."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=10, what=f"redis-server on {self.port}")

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
            return True
        return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def pg_proxy() -> Iterator[TcpProxy]:
    proxy = TcpProxy(("127.0.0.1", 5432))
    proxy.restore()
    yield proxy
    proxy.cut()


class Tmpfs:
    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(
                f"cannot mount a tmpfs here ({done.stderr.strip()}); see docs/reliability.md"
            )

    def fill(self) -> Path:
        """Write until the disk is full; returns the filler file."""
        filler = self.path / "filler.bin"
        block = b"\0" * 65536
        with open(filler, "wb") as fh, contextlib.suppress(OSError):
            while True:
                fh.write(block)
                fh.flush()
        return filler

    def unmount(self) -> None:
        for _ in range(20):
            if subprocess.run(["umount", str(self.path)], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
