#!/usr/bin/env bash
# Oracle: copy the reference JAX solution to where the instruction asks for the port.
set -euo pipefail
OUTPUT_DIR="${OUTPUT_DIR:-__OUTPUT__}"
SOLUTION_DIR="${SOLUTION_DIR:-$(cd "$(dirname "$0")" && pwd)}"
mkdir -p "$OUTPUT_DIR"
cp -r "$SOLUTION_DIR/__NAME__/." "$OUTPUT_DIR/"
