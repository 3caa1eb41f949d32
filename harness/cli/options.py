"""Command-line options that several `twin` commands take, each declared once.

Each option is an `Annotated` type carrying its flag and help, so every command that
takes it offers the same flag with the same help; a command gives only the default
(`audit_log: AuditLog = None`), or none where the option is required.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from task_model.model import Task

TaskDir = Annotated[Path, typer.Option("--task", help="Task directory (Harbor format).")]
AuditLog = Annotated[Path, typer.Option("--audit-log", help="Append boundary refusals here.")]

# A published task (laid out as published, no [metadata.twin]): where things are in its image; docs/tasks.md.
PublishedSettings = Annotated[
    Path,
    typer.Option("--settings", help="Settings of a published task (original, assets, output); docs/tasks.md."),
]
OriginalDir = Annotated[
    str,
    typer.Option("--original-dir", help="Published task: where the original is in the image (e.g. /app/torch_orig)."),
]
AssetsDir = Annotated[
    str, typer.Option("--assets-dir", help="Published task: where the assets are in the image ('' for none).")
]
OutputDir = Annotated[
    str, typer.Option("--output-dir", help="Published task: where the port goes in the image (e.g. /app/jax_repo).")
]


def load_task_option(
    task: Path,
    sandbox: str | None,
    settings: Path | None,
    original_dir: str | None,
    assets_dir: str | None,
    output_dir: str | None,
) -> Task:
    """The task named by `--task`, with a published task's `--settings` file and flags applied.

    Loaded for the sandbox its commands run in (under docker, its image built) and its
    notes said on stderr (`task_model.loader`).

    Raises:
        TaskError: the task is malformed, or a setting is.
    """
    from task_model.loader import load_task_for_sandbox
    from task_model.published import setting_flags

    return load_task_for_sandbox(task, sandbox, settings, setting_flags(original_dir, assets_dir, output_dir))
