"""Grading time of every bundled t2j-mini task: the task's unchanged grader on its oracle.

    python benchmarks/grading_time.py [--tasks DIR ...] [--sandbox bwrap] [--repeat N] [--out FILE]

Prints one row per task (seconds per grade, reward) and the machine's load; the
target is under 90 s per task on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark_adapter.grading.grader import oracle_copy, run_grader  # noqa: E402
from task_model.loader import load_task  # noqa: E402

TARGET_S = 90.0


def default_tasks() -> list[Path]:
    suite = REPO / "tasks" / "t2j-mini"
    return sorted(
        p for p in suite.iterdir() if (p / "task.toml").is_file() and (p / "solution").is_dir()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", type=Path, default=None)
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'task':24s} {'grade_s':>9s} {'reward':>8s}  within {TARGET_S:.0f}s")
    for task_dir in args.tasks or default_tasks():
        task = load_task(task_dir)
        times, rewards = [], []
        for _ in range(args.repeat):
            with oracle_copy(task) as app:
                grade = run_grader(task, app, sandbox=args.sandbox)
            times.append(grade.duration_s)
            rewards.append(grade.reward)
        row = {
            "task": task.name,
            "grade_s": statistics.median(times),
            "times_s": times,
            "reward": statistics.median(rewards),
            "error": grade.error,
        }
        rows.append(row)
        ok = "yes" if row["grade_s"] <= TARGET_S else "NO"
        print(f"{task.name:24s} {row['grade_s']:9.1f} {row['reward']:8.4f}  {ok}", flush=True)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cpus, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"{platform.platform()}"
    )
    if args.out is not None:
        args.out.write_text(
            json.dumps({"rows": rows, "cpus": os.cpu_count(), "load": load}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
