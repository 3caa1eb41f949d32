"""Running a task's unchanged grader on a candidate, in a fresh sandbox.

The grader is `tests/test.sh` exactly as the task ships it. It runs where the
candidate is at the task's candidate mount (`/app`), `tests/` at `/tests`, the
assets at `/assets`, and a new, empty `/logs/verifier/` that no agent ever had is
the only writable root; forbidden packages are physically absent and there is no
network. Afterwards twin reads `reward.json` (else, only where nothing is at that
name, `reward.txt`) from that directory and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from benchmark_adapter.grading.solve import solve_into, solve_script
from ground import isolation
from ground.agent_tree import copy_tree, remove_tree
from ground.boundary import Boundary
from ground.errors import TwinError
from ground.isolation import cache_root, scratch_dir, stage_root
from ground.sandbox import ExecResult
from ground.sandboxes.host_disk import host_shortage
from ground.sandboxes.presentation import refused_over_caps
from ground.sandboxes.registry import make_sandbox
from ground.untrusted_io import AgentFileError, read_regular_text
from task_model.layout import command_workdir, task_layout
from task_model.model import Task
from task_model.reference_env import reference_site

SCHEMA_VERSION = 1
REWARD_FILES = ("reward.json", "reward.txt")
STARTED = "twin-grader-started-3b7e"
MAX_REWARD_BYTES = 1 << 20


class GraderError(TwinError):
    """The grader cannot be run on this input (no candidate, no oracle, bad output directory)."""


class GraderInfraError(GraderError):
    """twin's own machinery failed around the grader: not the candidate's doing, never a score.

    Raised when the sandbox started but `test.sh` never ran in it, or when the grader
    says in `reward.json` (`"infrastructure_error": "why"`) that its own machinery
    failed (e.g. its nested sandbox could not get the isolation it needs), or when a
    grader that gave no reward ran while the host was out of disk space or inodes
    (`ground.sandboxes.host_disk.host_shortage`).
    """

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail  # the grader's output, when it ran at all: callers keep it beside the grade


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
        The `Grade`. Whatever the grader does once it runs is the candidate's outcome: a
        grader that crashes, times out, exits or writes no valid reward (because of what
        the candidate did) yields reward 0 with the reason in `error`; so does a grader the
        sandbox refused to start because the candidate's tree is over the snapshot caps.

    Raises:
        GraderError: the candidate directory is missing.
        GraderInfraError: test.sh never started in the sandbox, or the grader reported an
            infrastructure error of its own (see docs/agent-data.md): retried, never scored.
        ground.sandbox.SandboxError: the sandbox cannot be started.
    """
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
    logs_dir = scratch_dir("twin-verifier-")
    try:
        env, script = _grader_env(task, candidate, logs_dir, isolated=sandbox != "none")
        boundary = grader_boundary(task, candidate, logs_dir, audit_log=audit_log)
        box = make_sandbox(sandbox, boundary)
        try:
            started = time.monotonic()
            # The marker shows test.sh was reached: without it the sandbox failed, not the candidate.
            result = box.exec(
                ["bash", "-c", f'echo {STARTED} >&2; exec bash "$0"', script],
                cwd=(command_workdir(task) if sandbox != "none" else None) or "/tests",  # Harbor: WORKDIR
                env=env,
                timeout_s=task.verifier_timeout_s,
            )
            duration = time.monotonic() - started
        finally:
            box.close()
        log_tail = (result.stdout + result.stderr.replace(STARTED + "\n", ""))[-4000:]
        try:
            grade = _judge(result, logs_dir, log_tail)
        except GraderInfraError:
            if out_dir is not None:
                with contextlib.suppress(OSError):  # a full disk loses the logs, never the reason
                    (Path(out_dir) / "grade.json").unlink(missing_ok=True)  # an earlier grade is not this one
                    _keep_logs(logs_dir, Path(out_dir), log_tail)
            raise
        grade.update(
            task=task.name,
            candidate=str(candidate),
            returncode=result.returncode,
            timed_out=result.timed_out,
            duration_s=round(duration, 3),
            sandbox=sandbox,
            log_tail=log_tail,
        )
        out = Grade(**grade)
        if out_dir is not None:
            _keep(out, logs_dir, Path(out_dir))
        return out
    finally:
        remove_tree(logs_dir)


def _judge(result: ExecResult, logs_dir: Path, log_tail: str) -> dict[str, Any]:
    """The grade's fields from what the grader did: the candidate's outcome, or a GraderInfraError."""
    refused = refused_over_caps(result)
    if refused is not None:  # a read-only root (the candidate) grew over the caps: the candidate's doing
        grade: dict[str, Any] = {"reward": 0.0, "error": f"the grader did not run: {refused}"}
    elif STARTED not in result.stderr:
        raise GraderInfraError(
            f"the grader's sandbox did not start test.sh (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-300:]}",
            log_tail,
        )
    else:
        try:
            grade = _read_reward(logs_dir)
        except GraderInfraError as exc:
            raise GraderInfraError(str(exc), log_tail) from None
    if grade["reward"] == 0.0 and (short := host_shortage(_host_dirs())) is not None:
        # a zero while the machine cannot write is the machine's failure, not the candidate's score
        raise GraderInfraError(
            f"the grader gave no reward while the host was out of disk ({short}); "
            "free space, then grade again (twin grade, or twin migrate --resume)",
            log_tail,
        )
    return grade


def _host_dirs() -> list[Path]:
    """The host directories a grading writes through (never a capped root a sandbox could fill itself)."""
    return [stage_root(), Path(tempfile.gettempdir()), cache_root()]


def grader_boundary(task: Task, candidate: Path, logs_dir: Path, *, audit_log: Path | None) -> Boundary:
    """The boundary of the task's unchanged grader: see `ground.isolation.grader_boundary`."""
    layout = task_layout(task, candidate)
    return isolation.grader_boundary(
        layout,
        tests=task.tests_dir,
        logs=Path(logs_dir),
        audit_log=audit_log,
        wall_s=task.verifier_timeout_s,
    )


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
        site = reference_site(settings.original)
        if site is not None:  # as the isolated grader has it (ground.isolation.reference_env_parts)
            env["PYTHONPATH"] = str(site)
    return env, f"{env['TESTS_DIR']}/test.sh"


def _read_reward(logs_dir: Path) -> dict[str, Any]:
    """Read reward.json (else reward.txt); a missing or malformed file means reward 0.

    A reward is read from one place: where anything is at reward.json (a folder, a link, a
    FIFO), that is the grader's answer and a malformed one; reward.txt is read only where
    nothing is at reward.json.
    """
    json_path, txt_path = (logs_dir / name for name in REWARD_FILES)
    if os.path.lexists(json_path) and not stat.S_ISREG(os.lstat(json_path).st_mode):
        return {"reward": 0.0, "error": "malformed reward.json: not a regular file"}
    if os.path.lexists(json_path):
        try:
            data = json.loads(read_regular_text(json_path, MAX_REWARD_BYTES))
            if isinstance(data, dict) and data.get("infrastructure_error"):
                reward = 0.0
            else:
                reward = float(data["reward"])
        except (ValueError, KeyError, TypeError, AgentFileError, RecursionError) as exc:
            return {"reward": 0.0, "error": f"malformed reward.json: {str(exc)[:200]}"}
        if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
            return {"reward": 0.0, "error": f"reward {reward} outside [0, 1]"}
        if not isinstance(data, dict):
            return {"reward": 0.0, "error": "malformed reward.json: not an object"}
        if isinstance(data.get("infrastructure_error"), str) and data["infrastructure_error"]:
            raise GraderInfraError(f"the grader reported an infrastructure error: {data['infrastructure_error'][:300]}")
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
    if os.path.lexists(txt_path):
        try:
            reward = float(read_regular_text(txt_path, MAX_REWARD_BYTES).strip())
        except (ValueError, AgentFileError):
            return {"reward": 0.0, "error": "malformed reward.txt"}
        if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
            return {"reward": 0.0, "error": f"reward {reward} outside [0, 1]"}
        return {"reward": reward, "reward_file": "reward.txt"}
    return {"reward": 0.0, "error": "the grader wrote no reward.json or reward.txt"}


def _keep(grade: Grade, logs_dir: Path, out_dir: Path) -> None:
    """Copy the grader's log directory, its output's tail and the grade into `out_dir` (replacing earlier ones)."""
    _keep_logs(logs_dir, out_dir, grade.log_tail)
    tmp = out_dir / ".grade.json.tmp"
    tmp.write_text(grade.model_dump_json(indent=2))
    tmp.replace(out_dir / "grade.json")


def _keep_logs(logs_dir: Path, out_dir: Path, log_tail: str) -> None:
    """Copy the grader's log directory and its output's tail into `out_dir` (replacing earlier ones)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "verifier"
    remove_tree(target)
    copy_tree(logs_dir, target, max_bytes=64 << 20)  # written where candidate code ran: no links, capped
    (out_dir / "grader-output.txt").write_text(log_tail)  # test.sh's stdout and stderr (tail)


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

    A published task with only `solution/solve.sh` gets it run (`benchmark_adapter.grading.solve`).

    Raises:
        GraderError: the task ships no oracle; benchmark_adapter.grading.solve.SolveError: its solve.sh failed.
    """
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
        readable_to_all(dest)  # as Harbor's root reads it, whatever the solution's modes on disk
        yield dest


def readable_to_all(root: Path) -> None:
    """Let everyone read `root`'s files and enter its folders (the oracle copy; never links followed)."""
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, stat.S_IMODE(os.stat(folder).st_mode) | 0o555)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | 0o444)
