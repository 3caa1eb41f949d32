#!/usr/bin/env bash
# Install the oracle candidate at $APP_DIR (default /app).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP_DIR="${APP_DIR:-/app}"
mkdir -p "$APP_DIR"
cp -r "$HERE/app/." "$APP_DIR/"
