"""The `twin` command line.

Each capability's commands live in their own module (`harness/cli/*.py`) and
are registered here, so this file stays a table of contents. Every user-facing
failure is a `TwinError`: printed as one line, exit code 2.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.text import Text

from ground.errors import StopSignal, TwinError
from ground.sandboxes.presentation import recover_presented
from ground.sandboxes.quota import recover_capped
from ground.terminal import agent_console, styled
from harness import __version__
from harness.cli import bench, evidence, grade, migrate, models, probe, task
from harness.cli.stop_signals import stop_line, stopping_on_signals

app = typer.Typer(
    name="twin",
    help="Reference-grounded migration harness: diagnose, migrate, verify; then the unchanged grader.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"twin {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """twin: make migration agents better, and measure it honestly."""


app.command("migrate")(migrate.migrate_command)
app.command("grade")(grade.grade_command)
app.command("probe")(probe.probe_command)
app.add_typer(evidence.app, name="evidence", help="Show, compare, export and re-run evidence.")
app.command("bench")(bench.bench_command)
app.command("report")(bench.report_command)
app.command("models")(models.models_command)
app.add_typer(task.app, name="task", help="Make a task from your own repository (twin task new).")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `twin` console script; returns the exit code."""
    try:
        with stopping_on_signals(restore_after_stop=False):  # SIGTERM and SIGHUP: Ctrl-C's clean stop
            return _run(argv)
    except StopSignal as exc:  # arrived outside any command's own handling (as it printed its outcome)
        Console(stderr=True).print(f"stopped by {exc.name}")
        return 130


def _run(argv: list[str] | None) -> int:
    try:
        recover_presented()  # roots a killed twin left in sandbox slots go back before anything reads them
        recover_capped()  # and candidates a killed twin left on a capped filesystem are copied back out
        code = app(args=argv, standalone_mode=False)  # a command's typer.Exit(n) comes back as n
        if code == 130 and stop_line():  # a stop typer turned into a bare exit 130 (no command said it)
            Console(stderr=True).print(stop_line())
    except TwinError as exc:
        line = Text("error:", style="bold red") + styled(f" {exc}")  # the message is never markup
        agent_console(stderr=True).print(line, soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        Console(stderr=True).print("aborted")
        return 130
    except KeyboardInterrupt as exc:
        Console(stderr=True).print(f"stopped by {exc.name}" if isinstance(exc, StopSignal) else "interrupted")
        return 130
    except Exception as exc:
        # Usage errors of the (vendored) click arrive here in non-standalone mode.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            return 2
        raise
    return code if type(code) is int else 0


if __name__ == "__main__":
    sys.exit(main())
