#!/usr/bin/env bash
# Set up .venv (idempotent) and run the demo: write a few files, ingest them with the
# packaged all-MiniLM-L6-v2 model into demo.duckdb, search, print cited hits.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m hybridkb.devtools.demo "$@"
