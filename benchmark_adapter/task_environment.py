"""A task loaded for the sandbox its commands run in, and the notes shown where it runs.

Under the docker sandbox, a published task's `environment/Dockerfile` is built into an
image (`harness/sandbox/task_image.py`; the build context is `environment/` alone, without
network) that every role, probe and grader container of the task then runs on, and its
RUN steps count as honoured. Where the image cannot be built (no engine, a `FROM` image
that is not here, a failing step), one line says why and the task's files are laid out
as they are without docker; a RUN only the image could honour is then refused as before.
Every other sandbox lays the files out (`benchmark_adapter/dockerfile.py`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from benchmark_adapter.dockerfile import RunRefused
from benchmark_adapter.task import Task, load_task
from harness.ground.sandbox import SandboxError
from harness.sandbox.task_image import build_task_image, remember_task_image, remembered_task_image

Say = Callable[[str], None]


def say_on_stderr(line: str) -> None:
    """Print one line, plainly, on standard error."""
    print(line, file=sys.stderr, flush=True)


def load_task_for_sandbox(
    path: str | Path,
    sandbox: str | None,
    settings: str | Path | None = None,
    overrides: dict[str, str] | None = None,
    *,
    say: Say = say_on_stderr,
) -> Task:
    """Load a task (as `load_task`) for commands run in `sandbox`, and show its notes.

    Under `docker`, a published task's image is built (or reused) first; every docker
    sandbox of the task in this process then runs on it. The task's notes (what its
    Dockerfile's reading accepted with a caveat) are each said once, as `note: …`.

    Raises:
        TaskError: as `load_task`; a RUN the image would have honoured when it could not be built.
    """
    refused: RunRefused | None = None
    try:
        task = load_task(path, settings, overrides)
    except RunRefused as exc:
        if sandbox != "docker":
            raise
        refused = exc  # the image may honour it: read the rest of the task to find its context
        task = load_task(path, settings, {**(overrides or {}), "ignore_run": "true"})
    if sandbox == "docker" and task.environment is not None and remembered_task_image(task.root) is None:
        try:
            image = build_task_image(
                task.root / "environment",
                hidden=task.hidden_roots,
                laid_out=[c.inside for c in task.environment.copies],  # mounted per boundary, as without docker
            )
        except SandboxError as exc:
            say(f"note: task {task.name}: its image was not built ({exc}); its files are laid out instead")
            if refused is not None:
                raise refused from None
        else:
            remember_task_image(task.root, image)
            task = load_task(path, settings, overrides)  # read again: the image honours its RUN steps
    show_notes(task, say)
    return task


def show_notes(task: Task, say: Say = say_on_stderr) -> None:
    """Say each of a published task's notes once (`note: …`); twin's own layout has none."""
    for note in task.environment.notes if task.environment is not None else []:
        say(f"note: {note}")
