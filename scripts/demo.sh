#!/usr/bin/env bash
# The main job: the routerBench demo on the embedded default (SQLite + private Redis).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/trm demo "$@"
