"""`twin migrate`: run the diagnose-migrate-verify loop (or the base scaffold) on a task, then grade."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ground.errors import RunFailed, TwinError
from ground.terminal import agent_console
from harness.cli import options
from harness.models.factory import check_model
from harness.run.directory import RunConfig, RunDir
from harness.run.finish import closing_lines
from harness.run.migration import run_migration
from harness.scaffolds.registry import SCAFFOLDS, check_scaffold

if TYPE_CHECKING:
    from harness.run.session import RunInputs


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
    snapshot_every: int = typer.Option(
        None, "--snapshot-every", help="Snapshot the candidate every N model calls, and at round ends (default 8)."
    ),
    grade_snapshots: bool = typer.Option(
        None,
        "--grade-snapshots/--no-grade-snapshots",
        help="Grade every snapshot after the run: reward as a curve over what was spent (with --resume: "
        "grade a finished run's snapshots).",
    ),
    final_round: str = typer.Option(
        None,
        "--final-round",
        help="Which round is delivered: best-evidence (default: best evidence score among verified rounds) "
        "or last-complete (the latest round whose every step completed).",
    ),
    resume: str = typer.Option(None, "--resume", help="Continue a killed run (id or directory)."),
    skip_task_check: bool = typer.Option(
        False, "--skip-task-check", envvar="TWIN_SKIP_TASK_CHECK", help="Do not grade the task's oracle first."
    ),
) -> None:
    """Migrate a task's source repository with a model, then grade each round."""
    from harness.run.session import RunInputs
    from task_model.loader import load_task_for_sandbox

    console = agent_console()
    task_check = None
    if resume:
        inputs = _read_resumed(RunDir.open(resume, runs_dir))
        if rounds is not None and inputs.state.status == "finished":
            console.print(_finished_line(inputs, rounds), highlight=False, markup=False, soft_wrap=True)
            return
        if model_wait_s is not None:
            inputs = _override_wait(inputs, model_wait_s)
        if grade_snapshots is not None:
            inputs = _override_snapshot_grading(inputs, grade_snapshots)
    else:
        if task is None or model is None:
            raise TwinError("twin migrate needs --task DIR and --model M (or --resume RUN)")
        check_scaffold(scaffold)
        model_settings = dict(name=model, api_base=api_base, retries=model_retries, wait_s=model_wait_s)
        settings = dict(
            task=task.expanduser().resolve(),
            model={k: v for k, v in model_settings.items() if v is not None},
            scaffold=scaffold,
            rounds=rounds,
            seed=seed,
            sandbox=sandbox,
            grade=grade,
            final_rule=final_round,
            snapshot_every=snapshot_every,
            grade_snapshots=grade_snapshots,
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
        check_model(run_config.model)
        from harness.cli.task import check_before_run

        # beside the run's start: model calls stop once it fails, nothing is graded before it passed
        task_check = check_before_run(loaded, run_config.sandbox, skip=skip_task_check, background=True)
        inputs = RunInputs.create(runs_dir, run_config, loaded, run_id)
    outcome = run_migration(inputs, SCAFFOLDS, api_key=api_key, console=console, task_check=task_check)

    for line in [outcome, *closing_lines(inputs.run, inputs.config, inputs.state)]:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if inputs.state.status == "failed":
        raise RunFailed(
            f"run {inputs.state.run_id} ended failed ({inputs.state.stop_reason}); "
            f"see {inputs.run.root / 'crash.txt'}; resume with: twin migrate --resume {inputs.run.root}"
        )


def _read_resumed(run: RunDir) -> RunInputs:
    """A resumed run's inputs, its task loaded once for its sandbox (under docker its image built
    or reused); the task's notes on stderr."""
    from harness.run.session import RunInputs
    from task_model.loader import load_task_for_sandbox

    return RunInputs.read(run, lambda config: load_task_for_sandbox(config.task, config.sandbox))


def _finished_line(inputs: RunInputs, rounds: int) -> str:
    """`--rounds` on resuming a finished run: a finished run is not reopened, and the user is told so."""
    state = inputs.state
    return (
        f"run {state.run_id} is finished with {len(state.rounds)} of {inputs.config.rounds} rounds "
        f"({state.stop_reason or state.status}); --rounds {rounds} does not reopen a finished run: "
        "start a new run for more rounds"
    )


def _override_snapshot_grading(inputs: RunInputs, grade: bool) -> RunInputs:
    """Resuming with --grade-snapshots: the run's config says so from now on (a finished run is graded again,
    each round and snapshot graded before keeping its grade)."""
    config = inputs.config.model_copy(update={"grade_snapshots": grade})
    inputs.run.write_config(config)
    return replace(inputs, config=config)


def _override_wait(inputs: RunInputs, wait_s: float) -> RunInputs:
    """Resuming with another --model-wait-s: the run's config says so from now on."""
    config = inputs.config.with_model_wait(wait_s)
    inputs.run.write_config(config)
    return replace(inputs, config=config)


__all__ = ["migrate_command"]
