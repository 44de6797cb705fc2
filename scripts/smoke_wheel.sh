#!/usr/bin/env bash
# Install dist/hybridkb-*.whl (scripts/build_wheel.sh) into a clean venv and use it as a
# new user would, from an empty folder and an empty cache, offline: `hybridkb setup`,
# the demo, `hybridkb add` + `hybridkb search`, `hybridkb mcp` over stdio (tools/list and
# a search), and an ingest + search that must not import torch (torch and pyarrow must not
# even be installed). Prints the venv's size
# and each step's time. PYTHON=python3.X picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
PY=${PYTHON:-python3}
wheel=$(ls "$repo"/dist/hybridkb-*.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seconds() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }

start=$(date +%s.%N)
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel"
echo "installed $("$work/venv/bin/python" -V) in $(seconds "$start") s: $(du -sh "$work/venv" | cut -f1)"
for heavy in torch pyarrow; do  # neither is a core dependency (pyarrow: 174 MB)
  if "$work/venv/bin/python" -m pip show -q "$heavy" 2>/dev/null; then
    echo "FAIL: $heavy was installed" >&2
    exit 1
  fi
done

export PATH="$work/venv/bin:$PATH" HF_HUB_OFFLINE=1 HYBRIDKB_CACHE_DIR="$work/cache"
unset PYTHONPATH
cd "$work"  # nothing from the checkout on sys.path, no .env
start=$(date +%s.%N)
hybridkb setup >setup.log 2>&1 || { cat setup.log; exit 1; }
echo "ok: hybridkb setup from an empty cache in $(seconds "$start") s ($(tail -1 setup.log))"
start=$(date +%s.%N)
hybridkb setup >/dev/null
echo "ok: hybridkb setup again in $(seconds "$start") s"
start=$(date +%s.%N)
python -m hybridkb.devtools.demo --db demo.duckdb >demo.log 2>&1 || { cat demo.log; exit 1; }
grep -q "ITAA 1997 extract.pdf" demo.log
echo "ok: python -m hybridkb.devtools.demo in $(seconds "$start") s"
mkdir notes
echo "Depreciation spreads the cost of an asset over its useful life." >notes/tax.txt
echo "Employees accrue four weeks of annual leave every year." >notes/leave.txt
hybridkb --db kb.duckdb add --create Notes notes >/dev/null
start=$(date +%s.%N)
hybridkb --db kb.duckdb search Notes "how do assets lose value?" -k 1 >search.log
grep -q "tax.txt" search.log || { cat search.log; exit 1; }
echo "ok: hybridkb add + search (the search in $(seconds "$start") s)"
python "$repo/scripts/smoke_wheel.py" kb.duckdb
echo "smoke check passed"
