"""`twin task new` makes a Harbor task from your own repository; `twin task check` proves a task can be graded."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from benchmark_adapter.grading.authoring import new_task
from benchmark_adapter.grading.check import TaskCheck, TaskCheckFailed, check_task, default_defects
from benchmark_adapter.grading.interface_file import interface_entries
from benchmark_adapter.grading.pending_check import PendingCheck, start_task_check
from evidence_store import numbers
from ground.errors import TwinError
from ground.terminal import agent_console, styled
from ground.waiting import status_or_waiting
from harness.cli import options
from harness.cli.grade import grade_output_tail

app = typer.Typer(no_args_is_help=True, help="Make tasks from your own repositories, and check them.")


@app.command("new")
def new_command(
    dest: Path = typer.Argument(..., help="The task directory to create (or, with --refresh, to re-record)."),
    source: str = typer.Option(
        None, "--source", help="The PyTorch repository to migrate: a directory, or pypi:NAME==VERSION (a distribution)."
    ),
    include: list[str] = typer.Option(
        None, "--include", help="With --source pypi:…: a file or directory of the wheel, part of the original."
    ),
    include_closure: list[str] = typer.Option(
        None,
        "--include-closure",
        help="With --source pypi:…: a module whose static import closure is part of the original (repeatable).",
    ),
    exclude: list[str] = typer.Option(
        None, "--exclude", help="With --source pypi:…: a file or directory of the wheel to leave out (repeatable)."
    ),
    probe: list[Path] = typer.Option(
        None, "--probe", help="Probe file (repeatable; format in probes/README.md): the behaviour to preserve."
    ),
    assets: Path = typer.Option(None, "--assets", help="Checkpoints and data given with the task."),
    instruction: Path = typer.Option(None, "--instruction", help="The instruction (markdown) the agent gets."),
    interface: list[str] = typer.Option(
        None,
        "--interface",
        help="Instead of --instruction: a name (or signature) the port must keep, or a file of signatures with "
        "one-line descriptions (docs/tasks.md); repeatable.",
    ),
    oracle: Path = typer.Option(None, "--oracle", help="A reference JAX solution; it must score at least 0.97."),
    name: str = typer.Option(None, "--name", help="Task name (default: the directory's name)."),
    checkpoint_from: Path = typer.Option(
        None, "--checkpoint-from", help="A pickled state_dict (.pth): the task gets it as safetensors."
    ),
    output: str = typer.Option("/app/jax_repo", "--output", help="Where the instruction asks for the port."),
    refresh: bool = typer.Option(
        False, "--refresh", help="Re-record the references of an existing task from its original."
    ),
    sandbox: str = typer.Option("auto", "--sandbox", help="bwrap, none or auto (reference runs and the oracle)."),
    timeout_s: float = typer.Option(600.0, "--timeout-s", help="Time limit of one probe file's side."),
) -> None:
    """Make a task whose grader checks the probes' behaviour against references recorded from the original."""
    given = (source, include, include_closure, exclude, probe, assets, instruction, interface, oracle, name)
    given += (checkpoint_from,)
    if refresh and any(v for v in given):
        raise TwinError("--refresh takes only the task directory: it re-records from what the task holds")
    console = agent_console()
    names = interface_entries(list(interface or []))
    doing = "recording references from the original" + (" and grading the oracle" if oracle else "")
    with status_or_waiting(console, doing):
        report = new_task(
            dest,
            source=source if source is None or source.startswith("pypi:") else Path(source),
            include=list(include or []),
            include_closure=list(include_closure or []),
            exclude=list(exclude or []),
            probes=list(probe or []),
            assets=assets,
            instruction=instruction,
            interface=names,
            oracle=oracle,
            name=name,
            output=output,
            checkpoint_from=checkpoint_from,
            refresh=refresh,
            sandbox=sandbox,
            timeout_s=timeout_s,
            say=lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True),
        )
    for note in report.notes:
        console.print(styled(f"note: {note}", "dim"))
    for warning in report.warnings:
        agent_console(stderr=True).print(warning, markup=False, highlight=False)
    oracle_line = "" if report.oracle_reward is None else f"; oracle reward {report.oracle_reward:.4f}"
    verb = "re-recorded" if refresh else "wrote"
    console.print(f"{verb} {report.task}: {len(report.probes)} checks{oracle_line}", highlight=False)


@app.command("fetch")
def fetch_command(
    task: Path = typer.Argument(..., help="The task directory."),
    deps: bool = typer.Option(
        True,
        "--deps/--no-deps",
        help="Also build the original's reference environment (its runtime dependencies, torch held) and import "
        "what the task's probes use there.",
    ),
    sandbox: str = typer.Option("auto", "--sandbox", help="bwrap, none or auto: where the import check runs."),
) -> None:
    """Fetch a task's declared original (pip download, sha256 check) into twin's cache, and its reference environment.

    The runtime dependencies go into an environment of the original's own under twin's cache, never into
    twin's interpreter; only the reference side (and the grader) see it (docs/security.md).
    """
    from probes.reference_imports import import_failures, reference_modules
    from task_model.distribution import is_materialized, materialize
    from task_model.distribution_install import task_declaration
    from task_model.loader import load_task
    from task_model.reference_env import build, held_torch

    original = task_declaration(task)
    if original is None:
        raise TwinError(f"task {task} declares no original ([metadata.twin.original] in task.toml)")
    console = agent_console()
    if not is_materialized(original):
        console.print(styled(f"fetching {original.requirement} and laying out its declared files …", "dim"))
    laid_out = materialize(original)
    count = sum(1 for p in laid_out.rglob("*") if p.is_file())
    console.print(f"{original.requirement} ({original.license}): {count} files laid out in {laid_out}", soft_wrap=True)
    if not (deps and original.dependencies):
        return
    env = build(original, say=lambda line: console.print(styled(f"{line} …", "dim"), soft_wrap=True))
    held = held_torch()[0]
    installed = ", ".join(f"{e.name}=={e.version}" for e in env.lock) or "nothing (twin's interpreter has them all)"
    console.print(f"its reference environment ({env.root}, torch=={held} held): {installed}", soft_wrap=True)
    loaded = load_task(task)
    modules = reference_modules(loaded)
    console.print(styled(f"importing on the reference side: {', '.join(modules)} …", "dim"), soft_wrap=True)
    failed = import_failures(loaded, modules, sandbox_kind=sandbox)
    if failed:
        name, why = next(iter(failed.items()))
        raise TwinError(f"the reference side cannot import {name}: {why}")
    console.print(f"the reference side imports {', '.join(modules) or 'nothing it is asked to'}", soft_wrap=True)


@app.command("check")
def check_command(
    task: Path = typer.Argument(..., help="The task directory."),
    sandbox: str = typer.Option("auto", "--sandbox", help="bwrap, docker, none or auto."),
    defects: Path = typer.Option(
        None, "--defects", help="A defect list (DEFECTS: list[Defect]); default: twin's own for a bundled task."
    ),
    no_defects: bool = typer.Option(False, "--no-defects", help="Grade only the oracle and the empty candidate."),
    reference_sample: int = typer.Option(
        4, "--reference-sample", min=0,
        help="Re-run this many probes' references on the original and compare them with the frozen ones (0: none).",
    ),
    settings: options.PublishedSettings = None,
    original_dir: options.OriginalDir = None,
    assets_dir: options.AssetsDir = None,
    output_dir: options.OutputDir = None,
) -> None:
    """Grade the task's oracle (>= 0.97), an empty candidate (0) and its seeded defects, as a run would;
    re-run a sample of its references on the original (a task made by `twin task new`)."""
    from benchmark_adapter.grading.sweep import load_defects

    loaded = options.load_task_option(task, sandbox, settings, original_dir, assets_dir, output_dir)
    path = None if no_defects else defects or default_defects(loaded)
    seeded = load_defects(path) if path is not None else []
    console = agent_console()
    what = f"checking {loaded.name}: oracle, empty candidate, {len(seeded)} defects, references"
    with status_or_waiting(console, what):
        check = check_task(loaded, sandbox=sandbox, defects=seeded, reference_sample=reference_sample)
    print_check(console, check)
    slow = check.time_warning(loaded.verifier_timeout_s)
    if slow is not None:
        agent_console(stderr=True).print(slow, markup=False, highlight=False)
    if not check.passed:
        raise TaskCheckFailed(check.failure_line())


def print_check(console, check: TaskCheck) -> None:
    """The check's table; under it, each failed row's error and the grader's last output lines."""
    table = Table(title=f"task check: {check.task} (sandbox {check.sandbox})")
    for column in ("candidate", "expected", "reward", "result"):
        table.add_column(column, justify="right" if column == "reward" else "left")
    for row in check.rows:
        reward = "-" if row.reward is None else numbers.reward(row.reward)  # 1 - 4.7e-08 is not 1
        table.add_row(row.name, row.expected, reward, "ok" if row.passed else "FAILED")
    console.print(table)
    for row in check.rows:
        if row.passed:
            continue
        console.print(f"{row.name}: {row.error or 'reward outside what was expected'}", markup=False, highlight=False)
        tail = grade_output_tail(row.output_tail)
        if tail:
            console.print("  the grader's last output lines:", highlight=False)
            console.print(tail, markup=False, highlight=False)


def check_before_run(task, sandbox: str, *, skip: bool, background: bool = False) -> PendingCheck | None:
    """Before a run's first model call, or beside its start: the task's check (oracle and empty candidate).

    Done once per task content and sandbox kind (a pass is remembered). Each graded row is
    said on stderr as it comes, and a wait for the last one every few seconds.

    Args:
        background: start the check and return it (the run asks it before each model call
            and waits for it before grading); else wait for it here.

    Returns:
        The running check (with `background`), else None.

    Raises:
        TaskCheckFailed: one line naming what failed (waiting here).
    """
    err = agent_console(stderr=True)

    def say(line: str) -> None:
        err.print(line, markup=False, highlight=False)

    if skip:
        say(
            f"warning: the task check of {task.name} is skipped: a grader that cannot score its own "
            "oracle grades every round 0 (check it with `twin task check`)"
        )
        return None
    when = "the run stops" if background else "before any model call"
    pending = start_task_check(task, sandbox, say=say, when=when)
    if pending is None:
        return None
    beside = " beside the run's start (a failure stops the run)" if background else ""
    say(f"checking {task.name} once{beside}: its grader on its oracle and on an empty candidate")
    if background:
        return pending
    pending.wait()
    return None
