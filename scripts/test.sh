#!/usr/bin/env bash
# The test command: sets up .venv if needed, checks lint and types, runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check core app worker trm_mcp tests bench
.venv/bin/ruff format --check core app worker trm_mcp tests bench
# mypy checks beside the tests (a minute of one core from a fresh clone, while the tests spend
# much of theirs waiting on the servers they start); its verdict counts as before, after them.
types=$(mktemp)
trap 'rm -f "$types"' EXIT
.venv/bin/mypy core app worker trm_mcp >"$types" 2>&1 &
mypy_pid=$!
# Three processes, one test file each at a time (most tests wait on servers they started; two
# left a third of the 2 cores idle), one torch thread each. Slow files go first.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
tests=0
.venv/bin/pytest -n "${TRM_TEST_PROCESSES:-3}" --dist loadfile --durations=15 "$@" || tests=$?
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat "$types"
if [ "$mypy_status" -ne 0 ]; then
  echo "test.sh: mypy found errors (above)" >&2
  exit "$mypy_status"
fi
exit "$tests"
