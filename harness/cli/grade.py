"""`twin grade`: run a task's unchanged grader on a candidate (or on the task's oracle)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from benchmark_adapter.grading.grader import GraderInfraError, oracle_copy, run_grader
from evidence_store import numbers
from ground.errors import TwinError
from ground.terminal import agent_console, styled
from ground.untrusted_io import write_text_atomic
from harness.cli import options


def grade_command(
    task: options.TaskDir,
    candidate: Path = typer.Option(None, "--candidate", help="Candidate directory to grade."),
    oracle: bool = typer.Option(False, "--oracle", help="Grade the task's own solution/app/."),
    sandbox: str = typer.Option("auto", "--sandbox", help="bwrap, docker, none or auto."),
    out: Path = typer.Option(
        None, "--out", help="Write the grade (reward, components, checks) as JSON here."
    ),
    keep_logs: Path = typer.Option(
        None, "--keep-logs", help="Copy the grader's /logs/verifier here."
    ),
    audit_log: options.AuditLog = None,
    settings: options.PublishedSettings = None,
    original_dir: options.OriginalDir = None,
    assets_dir: options.AssetsDir = None,
    output_dir: options.OutputDir = None,
) -> None:
    """Grade a candidate (or the task's oracle solution) with the task's own, unchanged grader."""
    if oracle == (candidate is not None):
        raise TwinError("pass exactly one of --candidate DIR or --oracle")
    loaded = options.load_task_option(task, sandbox, settings, original_dir, assets_dir, output_dir)
    if out is not None and out.is_dir():
        raise TwinError(f"--out must be a file path, {out} is a directory")
    console = agent_console()
    try:
        if oracle:
            with oracle_copy(loaded) as target, console.status(f"grading {loaded.name} (oracle)"):
                grade = run_grader(loaded, target, sandbox=sandbox, out_dir=keep_logs, audit_log=audit_log)
        else:
            if not candidate.expanduser().is_dir():
                raise TwinError(f"candidate directory not found: {candidate}")
            with console.status(f"grading {loaded.name} ({candidate})"):
                grade = run_grader(loaded, candidate, sandbox=sandbox, out_dir=keep_logs, audit_log=audit_log)
    except GraderInfraError as exc:  # not a score: the grader's own words first, then the one-line reason
        tail = grade_output_tail(exc.log_tail)
        if tail:
            console.print(f"the grader's last output lines ({loaded.name}):", highlight=False)
            console.print(tail, markup=False, highlight=False)
        raise TwinError(f"{exc} (infrastructure: not the candidate's score)") from None
    if out is not None:  # the file first: nothing printed can cost the user the grade
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, grade.model_dump_json(indent=2))
    _print_grade(console, grade)
    if grade.reward == 0.0 or grade.error is not None:
        explain_zero(console, grade, loaded, None if oracle else candidate)
    if grade.error is not None:
        raise TwinError(f"grader of {loaded.name} gave no reward: {grade.error}")


def _print_grade(console: Console, grade) -> None:
    """A table on a terminal; whole plain lines anywhere else (a detail is never cut mid-number).

    Scores are rendered as `twin probe` renders them (`evidence_store.numbers`).
    """
    title = f"{grade.task}: reward {numbers.reward(grade.reward)}"
    checks = [(name, check) for name, check in sorted(grade.checks.items()) if isinstance(check, dict)]
    if not console.is_terminal:
        plain = {"highlight": False, "markup": False, "soft_wrap": True}
        console.print(title, **plain)
        for name, value in grade.components.items():
            console.print(f"{_fmt(value):>8}  {name}", **plain)
        for name, check in checks:
            detail = str(check.get("detail", ""))
            console.print(f"{_fmt(check.get('score')):>8}  {name}" + (f": {detail}" if detail else ""), **plain)
    else:
        table = Table(title=title, show_header=True)
        table.add_column("check / component")
        table.add_column("score", justify="right")
        table.add_column("detail", overflow="fold")
        for name, value in grade.components.items():
            table.add_row(styled(name, "bold"), _fmt(value), "")
        for name, check in checks:
            table.add_row(styled(name), _fmt(check.get("score")), styled(check.get("detail", "")))
        console.print(table)
    console.print(
        Text.assemble(
            "reward ",
            styled(numbers.reward(grade.reward), "bold"),
            f" (from {grade.reward_file or 'nothing'}; grader exit {grade.returncode}, "
            f"{grade.duration_s:.1f}s, sandbox {grade.sandbox})",
        )
    )


def explain_zero(console: Console, grade, task, candidate: Path | None) -> None:
    """Why a grade is zero, in the grader's own words: its output's last lines, never markup.

    For a published task it also says when `--candidate` holds the expected output folder
    one level down (`X/jax_repo`): the grader sees `--candidate` itself at the output path.
    """
    tail = grade_output_tail(grade.log_tail)
    if tail:
        console.print(f"the grader's last output lines ({grade.task}):", highlight=False)
        console.print(tail, markup=False, highlight=False)
    else:
        console.print(f"the grader of {grade.task} printed nothing", highlight=False)
    if grade.error:
        console.print(f"grader error: {grade.error}", markup=False, highlight=False)
    output = Path(task.settings.candidate_mount).name
    if candidate is not None and task.environment is not None and (candidate / output).is_dir():
        console.print(
            f"note: {candidate} holds {output}/; the grader sees --candidate itself at "
            f"{task.settings.candidate_mount}: did you mean --candidate {candidate / output}?",
            markup=False,
            highlight=False,
            soft_wrap=True,  # a path is never broken across lines
        )


def grade_output_tail(log_tail: str, lines: int = 20) -> str:
    """The last `lines` non-empty lines of a grader's output."""
    kept = [line for line in log_tail.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _fmt(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    return numbers.short_of_one(numbers.score(value), value)
