"""Running a published task's `solution/solve.sh` to obtain its oracle candidate.

Published tasks often ship the oracle as a script (files written by heredocs, or
copied from `/solution`) rather than as a directory. twin runs the script once, in
its own sandbox laid out as the task's Dockerfile lays out `/app` (the original,
the assets), with `solution/` at `/solution`, the output directory the only
writable root, no network and no `tests/`; what the script leaves in the output
directory is the oracle candidate.
"""

from __future__ import annotations

from pathlib import Path

from ground.errors import TwinError
from ground.isolation import solve_boundary
from ground.sandboxes.registry import make_sandbox
from task_model.layout import task_layout
from task_model.model import Task

SOLVE_TIMEOUT_S = 600.0


class SolveError(TwinError):
    """The task's solve.sh could not produce an oracle candidate."""


def solve_script(task: Task) -> Path | None:
    """The task's `solution/solve.sh`, if it ships one."""
    solution = task.solution_dir
    return solution / "solve.sh" if solution is not None and (solution / "solve.sh").is_file() else None


def solve_into(task: Task, dest: Path, *, sandbox: str = "auto") -> Path:
    """Run `solution/solve.sh` with `dest` mounted where the task expects the candidate.

    Raises:
        SolveError: no solve.sh, it failed, or it wrote nothing.
    """
    script = solve_script(task)
    if script is None:
        raise SolveError(f"task {task.name} has no solution/solve.sh")
    settings = task.settings
    dest.mkdir(parents=True, exist_ok=True)
    boundary = solve_boundary(
        task_layout(task, dest, source=task.source_dir),
        solution=task.solution_dir,
        workdir=task.environment.workdir if task.environment is not None else None,
        wall_s=SOLVE_TIMEOUT_S,
    )
    box = make_sandbox(sandbox, boundary)
    try:
        result = box.exec(["bash", "/solution/solve.sh"], env={"SOLUTION_DIR": "/solution"})
    finally:
        box.close()
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SolveError(f"task {task.name}: solution/solve.sh failed (exit {result.returncode}): {tail[0][:200]}")
    if not any(dest.iterdir()):
        raise SolveError(f"task {task.name}: solution/solve.sh wrote nothing to {settings.candidate_mount}")
    return dest
