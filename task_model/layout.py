"""A task's visible parts as the isolation policy sees them, and its grader's boundary.

`task_layout` turns a loaded task into the policy's `Layout` (where the candidate,
the original and the assets lie and appear, what is hidden, which packages are
absent, the task's image); the boundaries of roles, probes and the grader are made
from it by `ground.isolation`.
`copy_without_history` copies an original without its version-control state, so
that nothing can be read out of old commits, reflogs or packed refs.
`command_workdir` is where a published task's commands start (its WORKDIR).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePosixPath

from ground.boundary import Mount
from ground.isolation import Layout
from task_model.model import Task
from task_model.reference_env import reference_site

# Names never copied from the source repository: version-control state and pointers elsewhere.
VCS_NAMES = frozenset({".git", ".gitmodules", ".hg", ".hgsub", ".svn", ".bzr", ".jj"})

def copy_without_history(src: Path, dst: Path) -> None:
    """Copy a repository tree: no VCS state, fresh inodes, symlinks only if they stay inside."""
    src = src.resolve()

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in VCS_NAMES}
        for name in names:
            path = Path(directory) / name
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if not (target == src or src in target.parents) or not target.exists():
                    skipped.add(name)
        return skipped

    shutil.copytree(src, dst, symlinks=True, ignore=ignore, copy_function=shutil.copy2)


def task_layout(task: Task, candidate: Path, *, source: Path | None = None) -> Layout:
    """The task's visible parts for the isolation policy (`ground.isolation`)."""
    settings = task.settings
    assets = task.assets_dir if task.assets_dir is not None and task.assets_dir.is_dir() else None
    if source is None and task.environment is not None:
        source = task.source_dir  # a published task's grader sees /app as its Dockerfile lays it out
    return Layout(
        candidate=Path(candidate),
        candidate_mount=settings.candidate_mount,
        source=source,
        source_mount=settings.source_mount,
        assets=assets,
        assets_mount=settings.assets_mount,
        hidden=list(task.hidden_roots),
        forbidden_packages=list(settings.forbidden_packages),
        network=settings.allow_network,
        laid_out=laid_out_mounts(task),
        env=task.environment.env if task.environment is not None else {},
        image=task.image,
        reference_site=reference_site(settings.original),
    )


def laid_out_mounts(task: Task) -> list[Mount]:
    """A published task's files besides the original and the assets, read-only where its Dockerfile puts them."""
    return [Mount(host=laid.host, inside=laid.inside) for laid in task.extra_layout]


def command_workdir(task: Task) -> str | None:
    """Where a published task's commands start: its Dockerfile's last WORKDIR, as under Harbor.

    Harbor runs the agent's commands and `tests/test.sh` in the image's working directory,
    which is the last WORKDIR. twin starts there too where its sandbox has that directory:
    the task's image was built, or the WORKDIR is the output, holds the output or something
    the Dockerfile lays out, or lies inside a directory it lays out.

    Returns:
        The WORKDIR, or None: twin's own layout, no WORKDIR, or one the sandbox would lack.
    """
    env = task.environment
    if env is None or env.workdir == "/":
        return None
    if task.image is not None:
        return env.workdir
    workdir = PurePosixPath(env.workdir)
    for place in [task.settings.candidate_mount, *(c.inside for c in env.copies)]:
        if workdir == PurePosixPath(place) or workdir in PurePosixPath(place).parents:
            return env.workdir
    for laid in env.copies:
        inside = PurePosixPath(laid.inside)
        if inside in workdir.parents and (laid.host / workdir.relative_to(inside)).is_dir():
            return env.workdir
    return None
