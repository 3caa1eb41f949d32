"""The run's workspace: what a role is given, laid out on the host, and the roles' boundaries over it.

A workspace holds a copy of the source repository without its version-control
history (`task_model.layout.copy_without_history`), the task's assets (reused
read-only), and the candidate directory the Migrator writes. `role_boundary` hands
these to the isolation policy (`ground/isolation.py`), the one place that
decides what a command sees, and where.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ground import isolation
from ground.boundary import Boundary, Limits, Mount
from ground.errors import TwinError
from task_model.layout import command_workdir, copy_without_history, task_layout
from task_model.model import Task

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
    """The boundary of a role: see `ground.isolation.role_boundary`, over this workspace."""
    layout = task_layout(task, ws.candidate, source=ws.source).model_copy(
        update={"assets": ws.assets, "role_aliases": _role_aliases(task, ws)}
    )
    boundary = isolation.role_boundary(
        layout,
        name=name,
        write_candidate=write_candidate,
        side=side,
        audit_log=audit_log,
        run_files=_run_files(ws, audit_log),
        extra_mounts=extra_mounts,
        limits=limits,
    )
    workdir = command_workdir(task)  # a published task's commands start in its WORKDIR, as under Harbor
    return boundary if workdir is None else boundary.model_copy(update={"workdir": workdir})






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
