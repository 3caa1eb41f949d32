"""Everything one run needs: its inputs (config, state, task), each read or built once, and the live
objects built from them: model, budget, candidate repository, sandboxes, roles' workbenches.

Both scaffolds (the twin loop and the base scaffold) are built here from the same
parts, so a comparison between them differs only in the loop.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ground.agent_tree import discard_tree
from ground.boundary import Mount
from ground.isolation import default_limits
from ground.model import Model
from ground.sandbox import Sandbox
from ground.sandboxes.presentation import recover_presented
from ground.sandboxes.quota import EXT4, CappedRoot, recover_capped
from ground.sandboxes.registry import make_sandbox
from ground.trajectory import ToolCallRecord, Trajectory
from harness.models.budget import BudgetTracker
from harness.models.config import API_KEY_ENV
from harness.models.factory import make_model
from harness.models.ledger import LedgerBudget, budget_for_run
from harness.run import snapshots
from harness.run.candidate_repo import CandidateRepo
from harness.run.directory import RunConfig, RunDir, RunState, new_run_id
from harness.run.progress import Progress
from harness.run.workspace import Workspace, prepare_workspace, role_boundary
from roles.agent import ContextPolicy
from roles.tools import SCRATCH, ToolResult, Workbench
from task_model.loader import load_task
from task_model.model import Task


@dataclass(frozen=True)
class RunInputs:
    """What a run is built from: its directory, configuration, state and task, each read or built once.

    A new run writes its typed config and a fresh state into a new directory and reads
    nothing back; a resumed run reads both from its directory. Either way the task is
    loaded once, and the session shares these objects (its state is this state).
    """

    run: RunDir
    config: RunConfig
    state: RunState
    task: Task

    @classmethod
    def create(cls, runs_dir: Path, config: RunConfig, task: Task, run_id: str | None = None) -> RunInputs:
        """Start a new run: write `config` and a fresh state into `runs_dir/<run_id>`.

        Raises:
            RunError: the run directory exists already.
        """
        state = RunState(run_id=run_id or new_run_id())
        return cls(RunDir.create(runs_dir, config, state), config, state, task)

    @classmethod
    def read(cls, run: RunDir, load: Callable[[RunConfig], Task] | None = None) -> RunInputs:
        """Resume a run: its config and state from its directory, then its task.

        Args:
            load: loads the task the config names (e.g. for its sandbox); default `load_task`.

        Raises:
            RunError: config.json or state.json cannot be read.
            TaskError: the task is gone or malformed.
        """
        config = run.load_config()
        task = load(config) if load is not None else load_task(config.task)
        return cls(run, config, run.load_state(), task)


@dataclass
class Session:
    """The live objects of one run."""

    run: RunDir
    config: RunConfig
    state: RunState
    task: Task
    trajectory: Trajectory
    budget: BudgetTracker | LedgerBudget
    model: Model
    repo: CandidateRepo
    workspace: Workspace
    sandboxes: list[Sandbox] = field(default_factory=list)
    capped: CappedRoot | None = None  # the candidate on its own filesystem for the run (twin as root)
    scratch_root: Path | None = None
    """The read-only roles' scratch directories (see `workbench`), made on first use."""

    @property
    def model_label(self) -> str:
        return getattr(self.model, "label", None) or self.config.model.name

    def workbench(self, role: str, *, write: bool) -> Workbench:
        """The boundary and the two sandboxes of one role.

        A role that cannot write the candidate (Diagnoser, Verifier) also gets its scratch
        directory at `/scratch`: writable by its reference-side commands, read-only to its
        candidate-side ones, kept across all its commands of the run and removed at `close()`.
        It is no part of the candidate, no probe or grader mounts it, and twin never reads it.
        It carries data, never code: the candidate side mounts it non-executable and is
        code-confined (`Boundary.code_confined`), so a shared object the reference side put
        there (torch's, or any other) cannot be loaded there, from it or from a copy.
        A role that writes the candidate gets none: from the side where the original's whole
        framework is installed it would carry files into the candidate's writer wholesale,
        past the candidate side's absence of that framework (stdout, capped, is the only way).
        Nor does a role under the Docker sandbox, which cannot mount a root non-executable.
        """
        scratch = None if write or self.config.sandbox == "docker" else self.scratch_dir(role)
        benches = []
        for side, writable in (("candidate", write), ("reference", False)):
            on_reference = side == "reference"
            mounts = (
                []
                if scratch is None
                else [Mount(host=scratch, inside=SCRATCH, writable=on_reference, executable=on_reference)]
            )
            boundary = role_boundary(
                self.task,
                self.workspace,
                name=f"{role}:{side}",
                write_candidate=writable,
                side=side,
                audit_log=self.run.audit_log,
                extra_mounts=mounts,
            )
            benches.append((boundary, make_sandbox(self.config.sandbox, boundary)))
        self.sandboxes.extend(sandbox for _, sandbox in benches)
        (cand_boundary, cand_box), (_, ref_box) = benches
        return Workbench(
            cand_boundary,
            cand_box,
            ref_box,
            self.config.command_timeout_s,
            time_left=self.budget.wall_left,
            repo=self.repo,
            scratch=SCRATCH if scratch is not None else None,
        )

    def scratch_dir(self, role: str) -> Path:
        """The host directory behind one role's `/scratch`, outside the run directory (whose files
        every sandbox hides), made on first use."""
        if self.scratch_root is None:
            self.scratch_root = Path(tempfile.mkdtemp(prefix="twin-scratch-"))
        path = self.scratch_root / role
        path.mkdir(exist_ok=True)
        return path

    def record_tool(self, role: str, name: str, arguments: dict, result: ToolResult) -> None:
        """Observer for the agent loop: every tool call goes into the trajectory."""
        self.trajectory.append(
            ToolCallRecord(
                role=role,
                round=self.trajectory.context.round,
                step=self.trajectory.context.step,
                tool=name,
                arguments=arguments,
                result=result.text,
                ok=result.ok,
                duration_s=result.duration_s,
            )
        )

    @property
    def context_policy(self) -> ContextPolicy:
        """How much earlier tool output each model call carries again (the same for every scaffold)."""
        return ContextPolicy(
            keep_whole=self.config.context_whole_outputs,
            old_output_chars=self.config.context_old_output_chars,
            max_chars=self.config.context_max_chars,
        )

    def step_observer(self, progress: Progress) -> Callable[[str, int, object], None]:
        """Observer for the agent loop: label the trajectory and update the progress view."""

        def on_step(role: str, step: int, reply: object) -> None:
            self.trajectory.set_context(step=step)
            spent = self.budget.spent
            progress.step(step, spent.tokens, spent.usd, estimated=spent.tokens_estimated > 0)
            if snapshots.due(self.state.snapshots, spent.calls, self.config.snapshot_every):
                snapshots.take(self, "calls", round=self.trajectory.context.round, role=role)

        return on_step

    def snapshot_round(self, round: int) -> None:
        """A snapshot at round `round`'s end (its tag), with what the run spent by then."""
        if round in self.repo.rounds():
            snapshots.take(self, "round", round=round)

    def save(self, round: int | None = None) -> None:
        """Write the state with what was spent so far, charged to `round` (default: the round the
        trajectory is in; `RunState.account`)."""
        self.state.spent = self.budget.spent
        self.state.account(self.trajectory.context.round if round is None else round)
        self.run.save_state(self.state)

    def close(self) -> None:
        """Close the sandboxes and the roles' scratch, then put the candidate back on a plain directory."""
        try:
            for sandbox in self.sandboxes:
                sandbox.close()
            if self.scratch_root is not None:
                discard_tree(self.scratch_root)  # written by the roles' commands: removed without following links
                self.scratch_root = None
        finally:
            if self.capped is not None:
                self.capped.release()
                self.capped = None


def open_session(inputs: RunInputs, *, api_key: str | None = None, replay_from: int | None = None) -> Session:
    """Build the session of a new or resumed run from its inputs; reads neither config, state nor task again.

    Args:
        inputs: the run's directory, config, state and task.
        api_key: provider key; never written anywhere (falls back to $TWIN_API_KEY).
        replay_from: for a resumed run, its kept model calls of finished steps (where `replay:` continues and
            `inbox:` counts from).
    """
    recover_presented()  # before any boundary resolves a root a killed run left in a slot
    recover_capped()  # a killed run's candidate filesystem: copied out, unmounted

    run, config, state, task = inputs.run, inputs.config, inputs.state, inputs.task
    workspace = prepare_workspace(task, run.root)
    repo = CandidateRepo(run.candidate, run.candidate_git, audit_log=run.audit_log)
    repo.init()
    trajectory = Trajectory(run.trajectory)
    # a finished run's wall time is over: resuming it to grade again adds nothing to it
    budget = budget_for_run(BudgetTracker(config.budget, spent=state.spent, running=state.status != "finished"))
    model = make_model(
        config.model,
        trajectory=trajectory,
        budget=budget,
        api_key=api_key or os.environ.get(API_KEY_ENV),
        start=replay_from or 0,
    )
    session = Session(run, config, state, task, trajectory, budget, model, repo, workspace)
    if config.sandbox != "none":
        # Before the first sandbox: every sandbox of the run sees the candidate on one capped
        # filesystem (None where twin cannot mount: the sandboxes' watch holds it then).
        session.capped = CappedRoot.mount(workspace.candidate, default_limits().disk_mb, EXT4)
        if session.capped is not None:
            repo.check_written = session.capped.check_written
    return session


def default_runs_dir() -> Path:
    return Path(os.environ.get("TWIN_RUNS_DIR", "runs"))
