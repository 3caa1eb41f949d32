"""`twin evidence …`: show, diff, export and re-run the evidence of a run."""

from __future__ import annotations

import typer

from harness.errors import NotImplementedYet

app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show_command() -> None:
    """Show the evidence of a run."""
    raise NotImplementedYet("twin evidence show is not implemented yet")
