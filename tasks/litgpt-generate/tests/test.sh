#!/usr/bin/env bash
# Grader of litgpt-generate: runs the candidate (torch-free, offline, in a nested sandbox)
# and writes $LOGS_DIR/reward.json. Paths: TESTS_DIR (/tests), APP_DIR (/app), ASSETS_DIR (/assets),
# LOGS_DIR (/logs/verifier).
set -uo pipefail
TESTS_DIR="${TESTS_DIR:-/tests}"
export TESTS_DIR APP_DIR="${APP_DIR:-/app}" ASSETS_DIR="${ASSETS_DIR:-/assets}" LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$LOGS_DIR"
if ! "$PYTHON" "$TESTS_DIR/grade.py"; then
  # the grader itself failed: the reward is 0, never missing
  if [ ! -f "$LOGS_DIR/reward.json" ]; then
    echo '{"reward": 0.0, "components": {}, "error": "grader failed"}' > "$LOGS_DIR/reward.json"
  fi
  exit 1
fi
