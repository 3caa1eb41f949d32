"""Loading a task directory into a `Task`: the format chosen, and under docker its image built.

`read_task` is the one place a task directory is parsed (`task.toml`, `instruction.md`,
and a published task's settings file and flags); a command parses each task it is given
once and passes the loaded `Task` down. A task with `[metadata.twin]` (or an
`environment/source/`) is twin's own layout; any other is read as published
(`task_model.published`), its layout from its Dockerfile.

Under the docker sandbox, a published task's `environment/Dockerfile` is built into an
image (`ground/sandboxes/task_image.py`; the build context is `environment/` alone, without
network) before the task is made: the image is the task's `image`, every boundary made for
the task carries it, and every role, probe and grader container of the task runs on it; its
RUN steps count as honoured. Where the image cannot be built (no engine, a `FROM` image that
is not here, a failing step), one line says why and the task's files are laid out as they are
without docker; a RUN only the image could honour is then refused as before. Every other
sandbox lays the files out (`task_model/dockerfile.py`).

A task whose `[metadata.twin.original]` declares its original as a registry distribution gets
it laid out from twin's cache (fetched and hash-checked on first use,
`task_model/distribution.py`); `Task.source_dir` is then that directory, so every
reader of the source sees it as it would see a committed `environment/source/`.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ground.host_dirs import cache_root
from ground.sandbox import SandboxError
from ground.sandboxes.task_image import build_task_image
from ground.terminal import shown
from task_model.distribution import materialize
from task_model.dockerfile import DockerfileError, read_dockerfile
from task_model.model import (
    Task,
    TaskError,
    TwinTaskSettings,
    check_task_paths,
    hidden_roots,
    published_twin_keys,
    task_name,
)
from task_model.published import (
    PublishedSettings,
    load_published_task,
    published_settings,
    task_of_settings_file,
)

Say = Callable[[str], None]


@dataclass(frozen=True)
class TaskDirectory:
    """A task directory as parsed: its task.toml, its instruction, and how it is laid out."""

    root: Path
    config: dict
    instruction: str
    published: PublishedSettings | None
    """The settings a published task is read with; None: twin's own layout (`[metadata.twin]`)."""


def read_task(
    path: str | Path, settings: str | Path | None = None, overrides: dict[str, str] | None = None
) -> TaskDirectory:
    """Parse a task directory and choose its format (twin's own layout or published).

    Args:
        path: the task directory, or a settings file (`twin.toml`) whose `task` names it.
        settings: a settings file for a published task (original, assets, output), so
            that the task directory itself stays unchanged.
        overrides: keys of that settings file given directly (flags), on top of it.

    Raises:
        TaskError: the directory, task.toml, instruction.md or tests/test.sh is missing
            or malformed, or a published task's settings are.
    """
    path = Path(path).expanduser()
    if path.is_file() and path.name != "task.toml":
        if settings is not None:
            raise TaskError(f"{path} is a settings file already; pass --settings or a task directory")
        path, settings = task_of_settings_file(path), path
    root = path.resolve()
    if not root.is_dir():
        raise TaskError(f"task directory not found: {path}")
    toml_path = root / "task.toml"
    if not toml_path.is_file():
        raise TaskError(f"not a task: {root} has no task.toml")
    try:
        config = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"malformed task.toml in {root}: {exc}") from None
    instruction = root / "instruction.md"
    if not instruction.is_file():
        raise TaskError(f"task {root.name} has no instruction.md")
    if not (root / "tests" / "test.sh").is_file():
        raise TaskError(f"task {root.name} has no tests/test.sh (the grader)")
    metadata = config.get("metadata", {})
    twin_own = "twin" in metadata and not published_twin_keys(metadata)
    own_layout = twin_own or (root / "environment" / "source").is_dir()
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    published = None
    if settings is not None or overrides or not own_layout:
        if twin_own:
            raise TaskError(f"task {root.name} has [metadata.twin]: --settings applies to published tasks only")
        published = published_settings(settings, overrides)
    return TaskDirectory(root, config, instruction.read_text(), published)


def make_task(directory: TaskDirectory, *, image: str | None = None) -> Task:
    """The `Task` of a parsed directory; a published one's `image` (docker) honours its RUN steps.

    Raises:
        TaskError: bad `[metadata.twin]`, a path it names, a missing source repository, or
            (published) a Dockerfile, original, assets or output that cannot be honoured or found.
    """
    root, config = directory.root, directory.config
    if directory.published is not None:
        return load_published_task(root, config, directory.instruction, directory.published, image=image)
    toml_path = root / "task.toml"
    try:
        settings = TwinTaskSettings(**config.get("metadata", {}).get("twin", {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TaskError(f"bad [metadata.twin] {where} in {toml_path}: {first['msg']}") from None
    check_task_paths(root, settings, toml_path)
    if settings.original is not None and "source_dir" in config["metadata"]["twin"]:
        raise TaskError(
            f"task {root.name}: [metadata.twin] declares an original and a source_dir in {toml_path}; keep one"
        )
    if settings.original is not None and settings.original.mount is not None:
        raise TaskError(
            f"task {root.name}: [metadata.twin.original] mount is for published tasks; "
            f"twin's own layout mounts the original at source_mount ({toml_path})"
        )
    task = Task(
        root=root,
        name=task_name(config, root),
        instruction=directory.instruction,
        settings=settings,
        verifier_timeout_s=float(config.get("verifier", {}).get("timeout_sec", 600.0)),
        agent_timeout_s=float(config.get("agent", {}).get("timeout_sec", 3600.0)),
        original_dir=materialize(settings.original) if settings.original is not None else None,
    )
    if not task.source_dir.is_dir():
        raise TaskError(f"task {root.name}: source repository {settings.source_dir} not found")
    return task


def load_task(path: str | Path, settings: str | Path | None = None, overrides: dict[str, str] | None = None) -> Task:
    """Load and validate a task directory (`read_task`, then `make_task`), without an image.

    Raises:
        TaskError: as `read_task` and `make_task`.
    """
    return make_task(read_task(path, settings, overrides))


def say_on_stderr(line: str) -> None:
    """Print one line, plainly, on standard error, its control characters shown as escapes.

    A note quotes the task's own text (a Dockerfile's line, a name from task.toml): it is
    data, never escape sequences for the terminal (`ground.terminal.shown`).
    """
    print(shown(line), file=sys.stderr, flush=True)


def load_task_for_sandbox(
    path: str | Path,
    sandbox: str | None,
    settings: str | Path | None = None,
    overrides: dict[str, str] | None = None,
    *,
    say: Say = say_on_stderr,
) -> Task:
    """Load a task (as `load_task`) for commands run in `sandbox`, and show its notes.

    Under `docker`, a published task's image is built (or reused) first and becomes the
    task's `image`. The task's notes (what its Dockerfile's reading accepted with a
    caveat) are each said once, as `note: …`. Every command that runs a task's sandboxes
    loads it here, so a cache root twin must not trust (as root: `ground.host_dirs.cache_root`)
    is refused here, in one line, before anything is built or written.

    Raises:
        TaskError: as `load_task`; a RUN the image would have honoured when it could not be built.
        IsolationError: twin's cache is not root's alone (as root).
    """
    cache_root()
    directory = read_task(path, settings, overrides)
    image = task_image(directory, say) if sandbox == "docker" and directory.published is not None else None
    task = make_task(directory, image=image)
    show_notes(task, say)
    return task


def task_image(directory: TaskDirectory, say: Say = say_on_stderr) -> str | None:
    """Build (or reuse) the image of a published task's `environment/`; None (said why) where it cannot be.

    The paths its Dockerfile lays out are left out of the image (twin mounts them per
    boundary, as without docker); a Dockerfile twin cannot read at all builds nothing:
    `make_task` then refuses it with its own line.
    """
    root = directory.root
    try:
        layout = read_dockerfile(root / "environment" / "Dockerfile", ignore_run=True)
    except DockerfileError:
        return None
    try:
        return build_task_image(
            root / "environment", hidden=hidden_roots(root), laid_out=[c.inside for c in layout.copies]
        )
    except SandboxError as exc:
        name = task_name(directory.config, root)
        say(f"note: task {name}: its image was not built ({exc}); its files are laid out instead")
        return None


def show_notes(task: Task, say: Say = say_on_stderr) -> None:
    """Say each of a published task's notes once (`note: …`); twin's own layout has none."""
    for note in task.environment.notes if task.environment is not None else []:
        say(f"note: {note}")
