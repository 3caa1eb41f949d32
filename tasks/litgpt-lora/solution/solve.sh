#!/usr/bin/env bash
# Oracle: copy the reference JAX solution to the candidate directory.
set -euo pipefail
APP_DIR="${APP_DIR:-/app}"
SOLUTION_DIR="${SOLUTION_DIR:-$(cd "$(dirname "$0")" && pwd)}"
mkdir -p "$APP_DIR"
cp -r "$SOLUTION_DIR/app/." "$APP_DIR/"
