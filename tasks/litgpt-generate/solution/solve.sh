#!/usr/bin/env bash
# Copy the reference JAX solution to the candidate location.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
APP_DIR="${APP_DIR:-/app}"
mkdir -p "$APP_DIR"
cp -r "$here/app/." "$APP_DIR/"
