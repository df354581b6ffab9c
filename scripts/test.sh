#!/usr/bin/env bash
# The test command: sets up .venv if needed, checks lint and types, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check core app worker tests bench
.venv/bin/ruff format --check core app worker tests bench
.venv/bin/mypy core app worker
# Two processes, one test file each at a time (most tests wait on servers they started); one
# torch thread each, so two trainers never fight over the two cores. Slow files go first.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
.venv/bin/pytest -n "${TRM_TEST_PROCESSES:-2}" --dist loadfile --durations=15 "$@"
