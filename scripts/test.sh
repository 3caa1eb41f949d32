#!/usr/bin/env bash
# The test command of the README: fast suite (slow tests: add `-m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/system-deps.sh
[ -x .venv/bin/python ] || ./scripts/setup.sh
exec .venv/bin/python -m pytest -q -n "${TWIN_TEST_WORKERS:-2}" "$@"
