"""Per-trial overhead of `twin bench`, and the speed-up of 2 local workers over 1.

Runs the same scripted trials (tiny-calc fixture task, both scaffolds, 2 rounds,
2 seeds) with `--jobs 1` and `--jobs 2`. A trial's overhead is its wall time minus
the time spent in the model (recorded latencies; ~0 for a scripted model) and in the
grader (recorded grading durations): the bench machinery, the run set-up, the sandbox,
the probes and the bookkeeping. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_overhead.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.bench.run import run_bench  # noqa: E402
from harness.bench.schema import BenchConfig  # noqa: E402
from tests.harness import loop_scripts as plans  # noqa: E402


def model_and_grader_s(run_dir: Path) -> float:
    spent = 0.0
    trajectory = run_dir / "trajectory.jsonl"
    if trajectory.exists():
        for line in trajectory.read_text().splitlines():
            record = json.loads(line)
            if record["type"] == "model_call":
                spent += record["reply"]["latency_s"]
    grades = run_dir / "grades.json"
    if grades.exists():
        spent += sum(g["duration_s"] for g in json.loads(grades.read_text())["rounds"] if g.get("same_as") is None)
    return spent


def run(jobs: int, root: Path) -> tuple[float, list[float]]:
    scripts = root / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    plans.write_script(scripts / "tiny-calc-twin.json", plans.twin_fix_in_round_two())
    plans.write_script(scripts / "tiny-calc-base.json", plans.base_two_rounds())
    config = BenchConfig(
        name=f"jobs{jobs}", tasks=[plans.TINY_TASK], models=[f"scripted:{scripts}/{{task}}-{{scaffold}}.json"],
        rounds=2, seeds=2, jobs=jobs,
    )
    started = time.monotonic()
    results = run_bench(config, root / "benches")
    wall = time.monotonic() - started
    overheads = []
    for trial_id, trial in results.trials.items():
        run_dir = root / "benches" / config.name / "runs" / trial_id
        overheads.append(trial.trial_wall_s - model_and_grader_s(run_dir))
    return wall, overheads


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="twin-bench-overhead-") as tmp:
        wall1, overhead1 = run(1, Path(tmp) / "one")
        wall2, _ = run(2, Path(tmp) / "two")
    print(f"trials: {len(overhead1)} (tiny-calc, twin and base, 2 rounds, 2 seeds, scripted model)")
    print(f"per-trial overhead (everything but model and grader): median {statistics.median(overhead1):.2f} s, "
          f"max {max(overhead1):.2f} s")
    print(f"wall time, 1 worker: {wall1:.1f} s; 2 workers: {wall2:.1f} s; speed-up {wall1 / wall2:.2f}x")


if __name__ == "__main__":
    main()
