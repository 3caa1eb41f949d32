#!/usr/bin/env bash
# Create .venv with twin and everything its tests need (CPU torch 2.13.0, CPU JAX). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: this exact release is the CPU build on local disk.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
# Bundled tasks whose original is a registry distribution: fetched, hash-checked and laid out in twin's
# cache now, and their runtime dependencies installed into each original's own reference environment
# (a venv in that cache, torch held at 2.13.0; never into .venv), so that no run needs the index.
# (as root the cache must be root's alone, as twin checks it: else one line says what to fix)
CACHE=$(.venv/bin/python -c 'from ground.host_dirs import cache_root
from ground.errors import TwinError
try:
    print(cache_root())
except TwinError as exc:
    raise SystemExit(f"error: {exc}")')
echo "twin's cache: $CACHE (TWIN_CACHE_DIR, exported before this script and every twin command, puts it elsewhere)"
for toml in $(grep -l '^\[metadata\.twin\.original\]' tasks/*/task.toml tasks/*/*/task.toml 2>/dev/null); do
  .venv/bin/twin task fetch "$(dirname "$toml")"
done
echo "twin installed in .venv ($(.venv/bin/twin --version))"
