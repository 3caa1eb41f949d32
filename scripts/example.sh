#!/usr/bin/env bash
# Run twin's main job on a bundled task: `twin migrate` on mlp-train, replaying a recorded,
# scripted trajectory (no model is called; the output says so), then grading every round.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/system-deps.sh
[ -x .venv/bin/twin ] || ./scripts/setup.sh
exec .venv/bin/twin migrate --task tasks/t2j-mini/mlp-train \
    --model replay:examples/mlp-train/twin.jsonl --rounds 2 "$@"
