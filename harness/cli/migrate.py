"""`twin migrate`: run the diagnose-migrate-verify loop (or the base scaffold) on a task, then grade."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from evidence_store import numbers
from harness.cli import options
from harness.ground.errors import InfraFailure, Interrupted, TwinError
from harness.ground.model import ModelInfraError, ModelRequestError, ModelStopped, ReplayDivergence
from harness.ground.sandbox import SandboxError
from harness.ground.terminal import agent_console, styled
from harness.models.factory import NOT_LIVE, check_model, model_kind
from harness.models.replay import resume_position
from harness.models.scripted import ScriptExhausted
from harness.run.directory import RunConfig, RunDir, Scaffold
from harness.run.finish import RunGrades, closing_lines, export_final, grade_rounds, record_crash, write_summary
from harness.run.progress import Progress, RunView
from harness.run.session import open_session
from harness.run.trajectory import Trajectory
from harness.scaffolds.registry import check_scaffold, make_scaffold

if TYPE_CHECKING:
    from harness.run.session import RunInputs


USER_STOPS = (ReplayDivergence, ScriptExhausted, ModelRequestError, Interrupted)
"""Stops the user must act on (the model, replay or script they gave): the run is saved as it is and the error
shown. Every other failure during the run, on agent input or not, is recorded (`finish.record_crash`)."""


def migrate_command(
    task: options.TaskDir = None,
    model: str = typer.Option(
        None,
        "--model",
        envvar="TWIN_MODEL",
        help="litellm model string, replay:PATH, scripted:PATH, inbox:DIR or human.",
    ),
    scaffold: str = typer.Option("twin", "--scaffold", help="twin (the loop), base (one agent) or mini-swe-agent."),
    rounds: int = typer.Option(None, "--rounds", help="Refinement rounds (default 2)."),
    seed: int = typer.Option(None, "--seed", help="Trial seed, recorded with the run."),
    api_base: str = typer.Option(None, "--api-base", help="Base URL of an OpenAI-compatible server."),
    api_key: str = typer.Option(None, "--api-key", envvar="TWIN_API_KEY", help="Provider key (never written to disk)."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Token budget of the run."),
    max_usd: float = typer.Option(None, "--max-usd", help="Dollar budget of the run."),
    max_calls: int = typer.Option(None, "--max-calls", help="Model-call budget of the run."),
    max_wall_s: float = typer.Option(None, "--max-wall-s", help="Wall-time budget in seconds."),
    sandbox: str = typer.Option(None, "--sandbox", help="auto, bwrap, docker or none."),
    model_retries: int = typer.Option(None, "--model-retries", help="Retries of a failed model call."),
    model_wait_s: float = typer.Option(
        None, "--model-wait-s", help="inbox: seconds to wait for each reply (also when resuming)."
    ),
    config: Path = typer.Option(None, "--config", help="TOML file with a \\[run] table."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", envvar="TWIN_RUNS_DIR"),
    run_id: str = typer.Option(None, "--run-id", help="Name of the run directory."),
    grade: bool = typer.Option(True, "--grade/--no-grade", help="Grade every round after the run."),
    resume: str = typer.Option(None, "--resume", help="Continue a killed run (id or directory)."),
    skip_task_check: bool = typer.Option(
        False, "--skip-task-check", envvar="TWIN_SKIP_TASK_CHECK", help="Do not grade the task's oracle first."
    ),
) -> None:
    """Migrate a task's source repository with a model, then grade each round."""
    from benchmark_adapter.task.loader import load_task_for_sandbox
    from harness.run.session import RunInputs

    console = agent_console()
    if resume:
        inputs = _read_resumed(RunDir.open(resume, runs_dir))
        if rounds is not None and inputs.state.status == "finished":
            console.print(_finished_line(inputs, rounds), highlight=False, markup=False, soft_wrap=True)
            return
        if model_wait_s is not None:
            inputs = _override_wait(inputs, model_wait_s)
    else:
        if task is None or model is None:
            raise TwinError("twin migrate needs --task DIR and --model M (or --resume RUN)")
        check_scaffold(scaffold)
        settings = dict(
            task=task.expanduser().resolve(),
            model=model,
            scaffold=scaffold,
            rounds=rounds,
            seed=seed,
            api_base=api_base,
            sandbox=sandbox,
            grade=grade,
            model_retries=model_retries,
            model_wait_s=model_wait_s,
        )
        budget = {
            k: v
            for k, v in dict(max_tokens=max_tokens, max_usd=max_usd, max_calls=max_calls, max_wall_s=max_wall_s).items()
            if v is not None
        }
        if budget:
            settings["budget"] = budget
        run_config = (
            RunConfig.from_toml(config, **settings)
            if config
            else RunConfig.build(**{k: v for k, v in settings.items() if v is not None})
        )
        # refuse a malformed task before anything is written; under docker its image built; its notes on stderr
        loaded = load_task_for_sandbox(run_config.task, run_config.sandbox)
        check_model(run_config.model, wait_s=run_config.model_wait_s)
        from harness.cli.task import check_before_run

        check_before_run(loaded, run_config.sandbox, skip=skip_task_check)  # before any model call
        inputs = RunInputs.create(runs_dir, run_config, loaded, run_id)
    outcome = run_migration(inputs, api_key=api_key, console=console)

    for line in [outcome, *closing_lines(inputs.run, inputs.config, inputs.state)]:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def _read_resumed(run: RunDir) -> RunInputs:
    """A resumed run's inputs, its task loaded once for its sandbox (under docker its image built
    or reused); the task's notes on stderr."""
    from benchmark_adapter.task.loader import load_task_for_sandbox
    from harness.run.session import RunInputs

    return RunInputs.read(run, lambda config: load_task_for_sandbox(config.task, config.sandbox))


def run_migration(inputs: RunInputs, *, api_key: str | None = None, console: Console | None = None) -> str:
    """Run (or resume) the migration of `inputs`, grade it, write the summary; return a one-line outcome."""

    console = console or agent_console()
    run, config, state = inputs.run, inputs.config, inputs.state
    kind = model_kind(config.model)
    replay_from = None
    if kind in ("replay", "inbox"):
        done = {r.round: list(r.done) for r in state.rounds}
        replay_from = resume_position(Trajectory(run.trajectory).model_calls(), done)
    session = open_session(inputs, api_key=api_key, replay_from=replay_from)
    if kind in NOT_LIVE:
        console.print(styled(f"model: {session.model_label} — not a live model", "yellow"), soft_wrap=True)
    view = RunView(state.run_id, config.scaffold, session.model_label, config.rounds)
    try:
        # A person types at the terminal: a live panel redrawing over the prompt would hide it.
        with Progress(view, live=False if kind == "human" else None) as progress:
            if session.state.status != "finished":
                run.grades.unlink(missing_ok=True)  # grades of an unfinished run are stale on resume
                session.state.status = "running"
                session.save()
                try:
                    make_scaffold(config.scaffold, session, progress).run()
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
                except USER_STOPS:
                    session.save()  # a user-facing stop (replay diverged, script exhausted): as before
                    raise
                except Exception as exc:  # any other failure (committing, exporting, a bug): recorded, scored
                    record_crash(session, exc)
                    progress.message(f"the run stopped on an internal error ({session.state.stop_reason}); "
                                     f"grading what was committed; resume with: twin migrate --resume {run.root}")
            grades = None
            if config.grade:
                grades = grade_rounds(session, progress) if not run.grades.exists() else _load_grades(run)
            write_summary(session, grades)
            try:
                export_final(session)
            except Exception as exc:  # the grades and summary stand; the crash is recorded
                record_crash(session, exc)
    except KeyboardInterrupt:
        session.save()
        raise Interrupted(f"interrupted; continue with: twin migrate --resume {run.root}") from None
    finally:
        session.close()
    final = grades.final if grades else None
    reward = (
        "not graded"
        if final is None
        else f"reward {numbers.reward(final.reward)}"
        if final.reward is not None
        else f"grading failed: {final.error}"
    )
    return (
        f"run {state.run_id}: {session.state.stop_reason}; final candidate round "
        f"{session.state.final_round}, {reward} — {run.summary}"
    )


def _finished_line(inputs: RunInputs, rounds: int) -> str:
    """`--rounds` on resuming a finished run: a finished run is not reopened, and the user is told so."""
    state = inputs.state
    return (
        f"run {state.run_id} is finished with {len(state.rounds)} of {inputs.config.rounds} rounds "
        f"({state.stop_reason or state.status}); --rounds {rounds} does not reopen a finished run: "
        "start a new run for more rounds"
    )


def _override_wait(inputs: RunInputs, wait_s: float) -> RunInputs:
    """Resuming with another --model-wait-s: the run's config says so from now on."""
    checked = RunConfig.build(**{**inputs.config.model_dump(), "model_wait_s": wait_s}).model_wait_s
    config = inputs.config.model_copy(update={"model_wait_s": checked})
    inputs.run.write_config(config)
    return replace(inputs, config=config)


def _load_grades(run: RunDir):
    return RunGrades.model_validate_json(run.grades.read_text())


__all__ = ["migrate_command", "run_migration", "Scaffold"]
