"""`twin task new`: make a Harbor task (published layout, self-contained grader) from your own repository."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from benchmark_adapter.authoring import new_task
from harness.ground.errors import TwinError

app = typer.Typer(no_args_is_help=True, help="Make tasks from your own repositories.")


@app.command("new")
def new_command(
    dest: Path = typer.Argument(..., help="The task directory to create (or, with --refresh, to re-record)."),
    source: Path = typer.Option(None, "--source", help="The PyTorch repository to migrate."),
    probe: list[Path] = typer.Option(
        None, "--probe", help="Probe file (repeatable; format in probes/README.md): the behaviour to preserve."
    ),
    assets: Path = typer.Option(None, "--assets", help="Checkpoints and data given with the task."),
    instruction: Path = typer.Option(None, "--instruction", help="The instruction (markdown) the agent gets."),
    interface: list[str] = typer.Option(
        None, "--interface", help="Instead of --instruction: a name (or signature) the port must keep; repeatable."
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
    if refresh and any(v for v in (source, probe, assets, instruction, interface, oracle, name, checkpoint_from)):
        raise TwinError("--refresh takes only the task directory: it re-records from what the task holds")
    console = Console()
    names = [n.strip() for n in interface or [] if n.strip()]
    with console.status("recording references from the original" + (" and grading the oracle" if oracle else "")):
        report = new_task(
            dest,
            source=source,
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
        )
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"), highlight=False)  # a note is never markup
    oracle_line = "" if report.oracle_reward is None else f"; oracle reward {report.oracle_reward:.4f}"
    verb = "re-recorded" if refresh else "wrote"
    console.print(f"{verb} {report.task}: {len(report.probes)} checks{oracle_line}", highlight=False)
