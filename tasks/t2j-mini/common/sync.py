"""Copy the shared grading library into every t2j-mini task's `tests/` and the litgpt tasks' (tasks stay self-contained).

The one copy twin ships is `benchmark_adapter/grading/templates/grader/grading*.py` (package data: generated
graders get it too); each task's `tests/grading*.py` are copies of them.

Usage:
    python tasks/t2j-mini/common/sync.py           # refresh the copies
    python tasks/t2j-mini/common/sync.py --check   # exit 1 if any copy differs
"""

from __future__ import annotations

import sys
from pathlib import Path

COMMON = Path(__file__).resolve().parent
LIBRARY = COMMON.parents[2] / "benchmark_adapter" / "grading" / "templates" / "grader"
SHARED_FILES = ("grading.py", "grading_run.py", "grading_sandbox.py")


OTHER_TASKS = (COMMON.parents[1] / "litgpt-lora", COMMON.parents[1] / "litgpt-generate")
"""Bundled tasks outside t2j-mini whose graders use the same library."""


def task_test_dirs(suite: Path = COMMON.parent) -> list[Path]:
    """The `tests/` directory of every task in the suite (and, for the bundled suite, `OTHER_TASKS`)."""
    tasks = [*suite.iterdir(), *(OTHER_TASKS if suite == COMMON.parent else ())]
    return sorted(p / "tests" for p in tasks if (p / "tests" / "test.sh").is_file())


def stale_copies(suite: Path = COMMON.parent) -> list[Path]:
    """Copies that are missing or differ from the library's."""
    stale = []
    for tests in task_test_dirs(suite):
        for name in SHARED_FILES:
            copy = tests / name
            if not copy.is_file() or copy.read_bytes() != (LIBRARY / name).read_bytes():
                stale.append(copy)
    return stale


def sync(suite: Path = COMMON.parent) -> list[Path]:
    """Refresh every stale copy; returns the files written."""
    written = stale_copies(suite)
    for copy in written:
        copy.write_bytes((LIBRARY / copy.name).read_bytes())
    return written


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_copies()
        for path in stale:
            print(f"stale: {path}")
        return 1 if stale else 0
    for path in sync():
        print(f"updated: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
