#!/usr/bin/env bash
# The test command: sets up .venv if needed, checks lint and types, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check core app worker tests bench
.venv/bin/ruff format --check core app worker tests bench
.venv/bin/mypy core app worker
.venv/bin/pytest --durations=25 "$@"
