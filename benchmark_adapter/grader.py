"""Running a task's unchanged grader on a candidate, in a fresh sandbox.

The grader is `tests/test.sh` exactly as the task ships it. It runs where the
candidate is at the task's candidate mount (`/app`), `tests/` at `/tests`, the
assets at `/assets`, and a new, empty `/logs/verifier/` that no agent ever had is
the only writable root; forbidden packages are physically absent and there is no
network. Afterwards twin reads `reward.json` (else `reward.txt`) from that
directory and nothing else.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from benchmark_adapter.task import Task
from harness.errors import TwinError

SCHEMA_VERSION = 1
REWARD_FILES = ("reward.json", "reward.txt")


class GraderError(TwinError):
    """The grader cannot be run on this input (no candidate, no oracle, bad output directory)."""


class Grade(BaseModel):
    """What a task's grader said about one candidate."""

    schema_version: int = Field(default=SCHEMA_VERSION, description="Record format version.")
    task: str = Field(description="Task name.")
    candidate: str = Field(description="Host path of the graded candidate.")
    reward: float = Field(description="The grader's total reward in [0, 1]; 0 when it wrote none.")
    components: dict[str, Any] = Field(
        default_factory=dict, description="Reward components as the grader reported them."
    )
    checks: dict[str, Any] = Field(
        default_factory=dict, description="Per-check scores, when the grader reports them."
    )
    reward_file: str | None = Field(
        default=None,
        description="Which file the reward was read from (None: the grader wrote none).",
    )
    returncode: int = Field(description="Exit status of test.sh (124 on a time-out).")
    timed_out: bool = Field(default=False, description="The verifier time limit killed the grader.")
    duration_s: float = Field(description="Wall time of the grader.")
    sandbox: str = Field(description="Sandbox kind the grader ran in.")
    log_tail: str = Field(default="", description="Last lines of the grader's output.")
    error: str | None = Field(default=None, description="Why no valid reward was read, if so.")


def run_grader(
    task: Task,
    candidate: Path,
    *,
    sandbox: str = "auto",
    out_dir: Path | None = None,
    audit_log: Path | None = None,
) -> Grade:
    """Run `task`'s unchanged grader on `candidate` in a fresh sandbox and read its reward.

    Args:
        task: the loaded task.
        candidate: the candidate directory (mounted read-only at the task's candidate mount).
        sandbox: "auto" (bwrap), "bwrap", "docker" or "none" (no isolation: task paths are
            passed through TESTS_DIR/APP_DIR/ASSETS_DIR/LOGS_DIR instead of mounts).
        out_dir: where to keep the grader's log directory (`verifier/`) and `grade.json`.
        audit_log: where the boundary records refusals.

    Returns:
        The `Grade`. A grader that crashes or writes no reward yields reward 0 and `error`.

    Raises:
        GraderError: the candidate directory is missing.
        harness.sandbox.base.SandboxError: the sandbox cannot be started.
    """
    from harness.sandbox.registry import make_sandbox
    from harness.workspace import grader_boundary

    candidate = Path(candidate).expanduser().resolve()
    if not candidate.is_dir():
        raise GraderError(f"candidate directory not found: {candidate}")
    for hidden in task.hidden_roots:
        hidden = hidden.resolve()
        if candidate == hidden or hidden in candidate.parents:
            raise GraderError(
                f"candidate {candidate} lies in the task's hidden files; copy it out first "
                "(the oracle is graded from a copy, see oracle_copy)"
            )
    from harness.isolation import scratch_dir

    logs_dir = scratch_dir("twin-verifier-")
    try:
        boundary = grader_boundary(task, candidate, logs_dir, audit_log=audit_log)
        box = make_sandbox(sandbox, boundary)
        try:
            env, script = _grader_env(task, candidate, logs_dir, isolated=sandbox != "none")
            started = time.monotonic()
            result = box.exec(
                ["bash", script], cwd="/tests", env=env, timeout_s=task.verifier_timeout_s
            )
            duration = time.monotonic() - started
        finally:
            box.close()
        grade = _read_reward(logs_dir)
        grade.update(
            task=task.name,
            candidate=str(candidate),
            returncode=result.returncode,
            timed_out=result.timed_out,
            duration_s=round(duration, 3),
            sandbox=sandbox,
            log_tail=(result.stdout + result.stderr)[-4000:],
        )
        out = Grade(**grade)
        if out_dir is not None:
            _keep(out, logs_dir, Path(out_dir))
        return out
    finally:
        shutil.rmtree(logs_dir, ignore_errors=True)


def _grader_env(
    task: Task, candidate: Path, logs_dir: Path, *, isolated: bool
) -> tuple[dict[str, str], str]:
    """The grader's path variables, inside the sandbox or (unisolated) on the host."""
    settings = task.settings
    if isolated:
        env = {
            "TESTS_DIR": "/tests",
            "APP_DIR": settings.candidate_mount,
            "ASSETS_DIR": settings.assets_mount,
            "LOGS_DIR": "/logs/verifier",
        }
    else:
        env = {
            "TESTS_DIR": str(task.tests_dir),
            "APP_DIR": str(candidate),
            "ASSETS_DIR": str(task.assets_dir or ""),
            "LOGS_DIR": str(logs_dir),
        }
    return env, f"{env['TESTS_DIR']}/test.sh"


def _read_reward(logs_dir: Path) -> dict[str, Any]:
    """Read reward.json (else reward.txt); a missing or malformed file means reward 0."""
    json_path, txt_path = (logs_dir / name for name in REWARD_FILES)
    if json_path.is_file():
        try:
            data = json.loads(json_path.read_text())
            reward = float(data["reward"])
        except (ValueError, KeyError, TypeError) as exc:
            return {"reward": 0.0, "error": f"malformed reward.json: {exc}"}
        if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
            return {"reward": 0.0, "error": f"reward {reward} outside [0, 1]"}
        components = data.get("components", {})
        checks = data.get("checks", {})
        error = data.get("error")  # a grader that failed itself says so next to its zero
        return {
            "reward": reward,
            "components": components if isinstance(components, dict) else {},
            "checks": checks if isinstance(checks, dict) else {},
            "reward_file": "reward.json",
            "error": f"grader reported: {error}" if isinstance(error, str) and error else None,
        }
    if txt_path.is_file():
        try:
            reward = float(txt_path.read_text().strip())
        except ValueError:
            return {"reward": 0.0, "error": "malformed reward.txt"}
        if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
            return {"reward": 0.0, "error": f"reward {reward} outside [0, 1]"}
        return {"reward": reward, "reward_file": "reward.txt"}
    return {"reward": 0.0, "error": "the grader wrote no reward.json or reward.txt"}


def _keep(grade: Grade, logs_dir: Path, out_dir: Path) -> None:
    """Copy the grader's log directory and the grade into `out_dir` (replacing an earlier copy)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "verifier"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(logs_dir, target)
    tmp = out_dir / ".grade.json.tmp"
    tmp.write_text(grade.model_dump_json(indent=2))
    tmp.replace(out_dir / "grade.json")


def oracle_candidate(task: Task) -> Path:
    """The task's oracle candidate (inside the hidden files: grade a copy).

    `solution/app/`, or for a published task `solution/<output dir name>/` (e.g.
    `solution/jax_repo/`, what its `solve.sh` copies to `/app/jax_repo`).

    Raises:
        GraderError: the task ships no oracle.
    """
    solution = task.solution_dir
    names = ["app"]
    if task.environment is not None:
        names.insert(0, Path(task.settings.candidate_mount).name)
    for name in names:
        if solution is not None and (solution / name).is_dir():
            return solution / name
    raise GraderError(f"task {task.name} has no oracle solution (solution/{names[0]}/)")


@contextmanager
def oracle_copy(task: Task) -> Iterator[Path]:
    """A temporary copy of the oracle candidate, as `solve.sh` would leave it at /app.

    A published task with only `solution/solve.sh` gets it run (`benchmark_adapter.solve`).

    Raises:
        GraderError: the task ships no oracle; benchmark_adapter.solve.SolveError: its solve.sh failed.
    """
    from benchmark_adapter.solve import solve_into, solve_script

    try:
        source = oracle_candidate(task)
    except GraderError:
        if task.environment is None or solve_script(task) is None:
            raise
        source = None  # a published task whose oracle is a script: run it
    with tempfile.TemporaryDirectory(prefix="twin-oracle-") as tmp:
        dest = Path(tmp) / "app"
        if source is None:
            solve_into(task, dest)
        else:
            shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        yield dest
