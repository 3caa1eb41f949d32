#!/usr/bin/env bash
# The test command of the README: fast suite (slow tests: add `-m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/system-deps.sh
[ -x .venv/bin/python ] || ./scripts/setup.sh
# 4 workers on 2 cores: the tests wait on sandboxes, subprocesses and the disk about half the time
exec .venv/bin/python -m pytest -q -n "${TWIN_TEST_WORKERS:-4}" "$@"
