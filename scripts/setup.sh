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
# Byte-compile our sources, as installing a wheel does: an editable install has no .pyc
# files, and with PYTHONDONTWRITEBYTECODE set none are ever written, so every command
# compiled all of hybridkb again (0.1-0.2 s of a cold `hybridkb search`). Python checks
# each .pyc against its source's size and time, so an edited file is compiled afresh.
.venv/bin/python -m compileall -q src
# Export the packaged model to ONNX Runtime and measure int8 on this CPU now, so the
# first search or MCP start does not (about a minute, once per machine).
HF_HUB_OFFLINE=1 .venv/bin/hybridkb setup
