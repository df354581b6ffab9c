#!/usr/bin/env bash
# The main job: the routerBench demo on the embedded default (SQLite + private Redis).
set -euo pipefail
cd "$(dirname "$0")/.."
# The install is quiet and, on a fresh checkout, takes minutes: say so before it starts.
if [ ! -f .venv/.trm-installed ]; then
  echo "demo: installing into .venv first (the project, torch CPU included): about 5 minutes, once"
else
  echo "demo: checking .venv (seconds; minutes only when pyproject.toml changed)"
fi
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/trm demo "$@"
