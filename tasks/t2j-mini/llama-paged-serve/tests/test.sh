#!/usr/bin/env bash
# Grader of llama-paged-serve. Writes $LOGS_DIR/reward.json.
set -uo pipefail
export TESTS_DIR="${TESTS_DIR:-/tests}"
export APP_DIR="${APP_DIR:-/app}"
export ASSETS_DIR="${ASSETS_DIR:-/assets}"
export LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
mkdir -p "$LOGS_DIR"
exec "${PYTHON:-python3}" "$TESTS_DIR/grade.py"
