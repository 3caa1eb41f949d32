"""The run's workspace: what a role is given, laid out on the host, and the boundaries over it.

A workspace holds a copy of the source repository without its version-control
history (nothing can be read out of old commits, reflogs or packed refs), the
task's assets (reused read-only), and the candidate directory the Migrator writes.
`role_boundary` and `grader_boundary` hand these to the isolation policy
(`harness/isolation.py`), the one place that decides what a command sees, and where.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from benchmark_adapter.task import Task
from harness import isolation
from harness.boundary import Boundary, Limits, Mount
from harness.errors import TwinError
from harness.isolation import Layout, default_limits, etc_snapshot, python_mounts

__all__ = [
    "Workspace",
    "WorkspaceError",
    "copy_without_history",
    "default_limits",
    "etc_snapshot",
    "grader_boundary",
    "laid_out_mounts",
    "prepare_workspace",
    "python_mounts",
    "role_boundary",
    "task_layout",
]

# Names never copied from the source repository: version-control state and pointers elsewhere.
VCS_NAMES = frozenset({".git", ".gitmodules", ".hg", ".hgsub", ".svn", ".bzr", ".jj"})
_COMPLETE = ".source-complete"


class WorkspaceError(TwinError):
    """The workspace could not be prepared (unreadable source, no space, bad root)."""


class Workspace(BaseModel):
    """Host directories of one run's workspace."""

    root: Path = Field(description="The workspace directory.")
    source: Path = Field(description="Copy of the original repository, without history (read-only inside).")
    assets: Path | None = Field(default=None, description="The task's assets, reused read-only (None: none).")
    candidate: Path = Field(description="The candidate the Migrator writes (rw for it only).")


def prepare_workspace(task: Task, root: Path) -> Workspace:
    """Copy the source without history and create the candidate directory.

    Idempotent: a complete source copy is kept, an existing candidate is never wiped.

    Raises:
        WorkspaceError: the root is not a directory or the copy failed.
    """
    root = Path(root).resolve()
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"workspace root {root} exists and is not a directory")
    source = root / "source"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not (root / _COMPLETE).is_file():
            staging = root / "source.partial"
            shutil.rmtree(staging, ignore_errors=True)
            copy_without_history(task.source_dir, staging)
            shutil.rmtree(source, ignore_errors=True)
            staging.rename(source)
            (root / _COMPLETE).write_text(str(task.source_dir) + "\n")
        candidate = root / "candidate"
        candidate.mkdir(exist_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot prepare workspace {root}: {exc}") from None
    assets = task.assets_dir if task.assets_dir is not None and task.assets_dir.is_dir() else None
    return Workspace(root=root, source=source, assets=assets, candidate=candidate)


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
    """The task's visible parts for the isolation policy (`harness.isolation`)."""
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
    )


def role_boundary(
    task: Task,
    ws: Workspace,
    *,
    name: str,
    write_candidate: bool,
    side: Literal["reference", "candidate"],
    audit_log: Path | None,
    extra_mounts: Sequence[Mount] = (),
    limits: Limits | None = None,
) -> Boundary:
    """The boundary of a role: see `harness.isolation.role_boundary`, over this workspace."""
    layout = task_layout(task, ws.candidate, source=ws.source).model_copy(
        update={"assets": ws.assets, "role_aliases": _role_aliases(task, ws)}
    )
    return isolation.role_boundary(
        layout,
        name=name,
        write_candidate=write_candidate,
        side=side,
        audit_log=audit_log,
        run_files=_run_files(ws, audit_log),
        extra_mounts=extra_mounts,
        limits=limits,
    )


def grader_boundary(task: Task, candidate: Path, logs_dir: Path, *, audit_log: Path | None) -> Boundary:
    """The boundary of the task's unchanged grader: see `harness.isolation.grader_boundary`."""
    return isolation.grader_boundary(
        task_layout(task, candidate),
        tests=task.tests_dir,
        logs=Path(logs_dir),
        audit_log=audit_log,
        wall_s=task.verifier_timeout_s,
    )


def laid_out_mounts(task: Task) -> list[Mount]:
    """A published task's files besides the original and the assets, read-only where its Dockerfile puts them."""
    return [Mount(host=laid.host, inside=laid.inside) for laid in task.extra_layout]


def _role_aliases(task: Task, ws: Workspace) -> list[Mount]:
    """A published task's original and assets also at `/source` and `/assets`, where the roles'
    prompts say they are (probes and the grader see only the Dockerfile's paths)."""
    if task.environment is None:
        return []
    aliases = []
    if task.settings.source_mount != "/source":
        aliases.append(Mount(host=ws.source, inside="/source"))
    if ws.assets is not None and task.settings.assets_mount != "/assets":
        aliases.append(Mount(host=ws.assets, inside="/assets"))
    return aliases


def _run_files(ws: Workspace, audit_log: Path | None) -> list[Path]:
    """The run's own files (evidence, trajectories, logs, grades): never visible.

    Everything in the workspace root and in the audit log's directory (the run
    directory) except the workspace's visible roots and the directories holding them,
    and the candidate's `.git` pointer file.
    """
    visible = [p.resolve() for p in (ws.source, ws.candidate, ws.assets) if p is not None]
    places = [ws.root] + ([audit_log.parent] if audit_log is not None else [])
    files: list[Path] = [] if audit_log is None else [audit_log]
    for place in places:
        if not place.is_dir():
            continue
        for entry in place.iterdir():
            resolved = entry.resolve()
            if any(resolved == v or resolved in v.parents for v in visible):
                continue
            files.append(entry)
    # The candidate's git pointer names the run's host directory (and its history): hidden,
    # so that inside it is an empty, read-only file.
    pointer = ws.candidate / ".git"
    if pointer.is_file() and not pointer.is_symlink():
        files.append(pointer)
    return files
