"""A bundled task's seeded-defect sweep: its grader on its oracle and on every defect.

    python benchmarks/defect_sweep.py tasks/litgpt-lora [--jobs 2] [--out benchmarks/results/litgpt-lora-sweep.json]

The defects are twin's own (`tests/benchmark_adapter/defects/<task>.py`). Prints one row per
defect (reward, caught, the checks it tripped) and the fraction caught; `--out` keeps the whole
report (`SweepReport`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark_adapter.grading.check import default_defects  # noqa: E402
from benchmark_adapter.grading.sweep import load_defects, run_sweep  # noqa: E402
from benchmark_adapter.task.loader import load_task  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    task = load_task(args.task)
    path = default_defects(task)
    if path is None:
        print(f"no defect list for {task.name}", file=sys.stderr)
        return 2
    start = time.monotonic()
    report = run_sweep(task, load_defects(path), sandbox=args.sandbox, jobs=args.jobs)
    for outcome in report.defects:
        mark = "caught" if outcome.caught else "MISSED"
        print(f"{outcome.name:40s} {outcome.reward:.4f} {mark:7s} {', '.join(outcome.tripped[:4])}")
    print(f"oracle {report.oracle_reward:.4f}; caught {report.caught_fraction:.3f} of {len(report.defects)} "
          f"({time.monotonic() - start:.0f} s)")  # fmt: skip
    if args.out:
        args.out.write_text(report.model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
