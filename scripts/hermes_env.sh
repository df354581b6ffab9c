#!/usr/bin/env bash
# Optional: hermes-agent 0.19.0 (with its MCP client and webhook gateway) in a venv of its own,
# .venv-hermes. It pins exact versions of pydantic, cryptography, psutil, ... that are not ours,
# so it cannot be an extra of this project. The Hermes tests (tests/hermes, tests/mcp) use it when
# it is there and are skipped, saying why, when it is not.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-hermes/bin/python ] || "$PY" -m venv .venv-hermes
.venv-hermes/bin/pip install -q 'hermes-agent==0.19.0' 'mcp==1.26.0' aiohttp
echo "hermes: $(.venv-hermes/bin/hermes --version 2>/dev/null | head -1)"
