#!/usr/bin/env bash
# Run twin's main job on a bundled example task.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/twin ] || ./scripts/setup.sh
echo "twin migrate is not implemented yet; showing the CLI instead." >&2
exec .venv/bin/twin --help
