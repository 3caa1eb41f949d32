"""One migration, run or resumed: open its session, drive its scaffold, record how it ended, grade, summarize.

`run_migration` is what `twin migrate` calls once its inputs are read; every failure
during the run is sorted here: a user-facing stop (a replay that diverged, a script
that ran out, a refused request, Ctrl-C) saves the run as it is and propagates; a
model or sandbox infrastructure failure marks the run failed and propagates as an
`InfraFailure`; any other failure is recorded as a crash (`finish.record_crash`) and
what was committed is still graded.

The scaffolds are handed in by name (`harness.scaffolds.registry.SCAFFOLDS`): they are
built from this package's session, so this package cannot import them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from benchmark_adapter.grading.check import TaskCheckFailed
from evidence_store import numbers
from ground.errors import InfraFailure, Interrupted, StopSignal
from ground.model import ModelInfraError, ModelRequestError, ModelStopped, ReplayDivergence
from ground.sandbox import SandboxError
from ground.terminal import agent_console, styled
from ground.trajectory import Trajectory
from harness.models.replay import resume_position
from harness.models.scripted import ScriptExhausted
from harness.run import snapshots
from harness.run.finish import earlier_grades, export_final, grade_rounds, record_crash, write_summary
from harness.run.progress import Progress, RunView
from harness.run.session import Session, open_session
from harness.run.snapshot_grades import grade_snapshots
from harness.run.task_gate import gate_model, saying_to_progress, stop_for_check, wait_for_check

if TYPE_CHECKING:
    from rich.console import Console

    from benchmark_adapter.grading.pending_check import PendingCheck
    from harness.run.session import RunInputs


class Scaffold(Protocol):
    """Runs (or resumes) one run's rounds.

    `run()` commits each round's candidate, sets the state's final round, stop reason
    and status, and saves it. A budget running out ends it cleanly; infrastructure
    failures and `ModelStopped` propagate to the caller.
    """

    def run(self) -> None: ...


ScaffoldFactory = Callable[[Session, Progress], Scaffold]
"""Builds a scaffold over one run's session, reporting to `progress`."""

USER_STOPS = (ReplayDivergence, ScriptExhausted, ModelRequestError, Interrupted)
"""Stops the user must act on (the model, replay or script they gave): the run is saved as it is and the error
shown. Every other failure during the run, on agent input or not, is recorded (`finish.record_crash`)."""


def run_migration(
    inputs: RunInputs,
    scaffolds: Mapping[str, ScaffoldFactory],
    *,
    api_key: str | None = None,
    console: Console | None = None,
    task_check: PendingCheck | None = None,
) -> str:
    """Run (or resume) the migration of `inputs`, grade it, write the summary; return a one-line outcome.

    Args:
        inputs: the run's directory, config, state and task.
        scaffolds: scaffold factories by name; `inputs.config.scaffold` picks one.
        api_key: provider key; never written anywhere.
        console: where the not-a-live-model notice goes (the agent console by default).
        task_check: the task's check, started beside the run: model calls stop once it fails,
            and nothing is graded before its verdict.

    Raises:
        InfraFailure: the model provider or a sandbox failed (the run is saved, resumable).
        ModelStopped: the model asked to stop (the run is saved, resumable).
        Interrupted: Ctrl-C (the run is saved, resumable).
        TaskCheckFailed: the task's check failed (the run is saved, stopped).
    """
    console = console or agent_console()
    run, config, state = inputs.run, inputs.config, inputs.state
    kind = config.model.kind
    replay_from = None
    if kind.resumes_at_a_call:
        done = {r.round: list(r.done) for r in state.rounds}
        replay_from = resume_position(Trajectory(run.trajectory).model_calls(), done)
    session = open_session(inputs, api_key=api_key, replay_from=replay_from)
    gate_model(session, task_check)
    if not kind.live:
        console.print(styled(f"model: {session.model_label} — not a live model", "yellow"), soft_wrap=True)
    view = RunView(state.run_id, config.scaffold, session.model_label, config.rounds)
    try:
        # A person types at the terminal: a live panel redrawing over the prompt would hide it.
        with (
            Progress(view, live=False if kind.is_person else None) as progress,
            saying_to_progress(task_check, progress),
        ):
            if session.state.status != "finished":
                run.grades.unlink(missing_ok=True)  # grades of an unfinished run are stale on resume
                session.state.status = "running"
                session.save()
                try:
                    scaffolds[config.scaffold](session, progress).run()
                    if session.state.rounds:  # the candidate as the run left it, with all it spent
                        snapshots.take(session, "end", round=max(r.round for r in session.state.rounds))
                except ModelStopped as exc:
                    session.state.status = "stopped"
                    session.state.stop_reason = f"stopped: {exc}"
                    session.save()
                    raise ModelStopped(f"{exc} (resume with: twin migrate --resume {run.root})") from None
                except (ModelInfraError, SandboxError) as exc:
                    session.state.status = "failed"
                    session.state.stop_reason = f"infrastructure: {exc}"
                    session.save()
                    raise InfraFailure(
                        f"{exc} (infrastructure; resume with: twin migrate --resume {run.root})"
                    ) from None
                except TaskCheckFailed as exc:
                    stop_for_check(session, exc)
                    raise
                except USER_STOPS:
                    session.save()  # a user-facing stop (replay diverged, script exhausted): as before
                    raise
                except Exception as exc:  # any other failure (committing, exporting, a bug): recorded, scored
                    record_crash(session, exc)
                    progress.message(
                        f"the run stopped on an internal error ({session.state.stop_reason}); "
                        f"grading what was committed; resume with: twin migrate --resume {run.root}"
                    )
            session.budget.stop_clock()  # the rounds are over: the run's wall time ends here (`figures`)
            session.save()
            wait_for_check(session, task_check, progress)
            grades = None
            if config.grade:  # a resumed run keeps its grades, but grades again the rounds twin failed to grade
                grading_started = time.monotonic()
                earlier = earlier_grades(run)
                grades = grade_rounds(session, progress, earlier)
                if config.grade_snapshots:
                    grades = grade_snapshots(session, progress, grades, earlier)
                session.state.grading_s = time.monotonic() - grading_started
                session.save()
            write_summary(session, grades)
            try:
                export_final(session)
            except Exception as exc:  # the grades and summary stand; the crash is recorded
                record_crash(session, exc)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (`StopSignal`): saved as stopped, resumable
        how = f"stopped by {exc.name}" if isinstance(exc, StopSignal) else "interrupted"
        if session.state.status == "running":  # a finished run interrupted while grading stays finished
            session.state.status = "stopped"
            session.state.stop_reason = how
        session.save()
        raise Interrupted(f"{how}; continue with: twin migrate --resume {run.root}") from None
    finally:
        session.close()
    final = grades.final if grades else None
    reward = (
        "not graded"
        if final is None
        else f"reward {numbers.reward(final.reward)}"
        if final.reward is not None
        else final.why
    )
    return (
        f"run {state.run_id}: {session.state.stop_reason}; final candidate round "
        f"{session.state.final_round}, {reward} — {run.summary}"
    )
