#!/usr/bin/env bash
# Set up .venv (idempotent) and run the whole test suite, real model and Postgres included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not model"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest -m "not slow" "$@"
