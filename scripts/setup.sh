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
echo "twin installed in .venv ($(.venv/bin/twin --version))"
