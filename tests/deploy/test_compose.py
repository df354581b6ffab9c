"""`docker compose config` accepts docker-compose.yml (no engine needed: nothing starts)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.deploy.conftest import ROOT


def _compose() -> list[str]:
    """`docker compose` (v2 plugin), else `docker-compose` (v1); skip when neither is here."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("no docker compose client on PATH")


def _config(*extra: str, token: str | None = "t0ken") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRM_", "COMPOSE_"))}
    if token is not None:
        env["TRM_API_TOKEN"] = token
    return subprocess.run(
        [*_compose(), "-f", str(ROOT / "docker-compose.yml"), "config", *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )


def test_compose_config_passes() -> None:
    result = _config()
    assert result.returncode == 0, result.stderr
    for service in ("postgres", "redis", "api", "decide", "worker-gpu0", "worker-cpu"):
        assert f"  {service}:" in result.stdout


def test_compose_runs_migrations_first_and_gives_each_gpu_worker_one_device() -> None:
    rendered = _config()
    assert rendered.returncode == 0, rendered.stderr
    text = rendered.stdout
    assert "trm db upgrade && exec trm serve" in text
    assert "CUDA_VISIBLE_DEVICES: '0'" in text or 'CUDA_VISIBLE_DEVICES: "0"' in text
    assert "capabilities:" in text and "gpu" in text and "device_ids:" in text
    for volume in ("runs:", "models:", "/var/lib/trm/runs", "/var/lib/trm/models"):
        assert volume in text


def test_compose_refuses_to_expose_the_api_without_a_token() -> None:
    result = _config(token=None)
    assert result.returncode != 0
    assert "TRM_API_TOKEN" in result.stderr + result.stdout


def test_compose_json_is_well_formed_when_supported() -> None:
    cmd = _compose()
    if cmd != ["docker", "compose"]:
        pytest.skip("--format json needs the v2 plugin")
    result = _config("--format", "json")
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    gpu = services["worker-gpu0"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"] and gpu["device_ids"] == ["0"]
