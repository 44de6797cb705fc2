#!/usr/bin/env bash
# Set up .venv with the dev extras (idempotent), check the code (ruff lint and format,
# mypy --strict, deptry: every import a declared dependency), then run the whole test
# suite, real model and Postgres included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not model"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
echo "== ruff check, ruff format --check, mypy --strict src tests, deptry src"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
.venv/bin/mypy --strict src tests
.venv/bin/deptry src
export HF_HUB_OFFLINE=1
# The ci profile: the long property and fuzz runs at their full budgets (tests/support/long_runs.py).
exec .venv/bin/python -m pytest -m "not slow" --hypothesis-profile=ci "$@"
