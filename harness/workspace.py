"""The run's workspace: what a role is given, laid out on the host, and the boundaries over it.

A workspace holds a copy of the source repository without its version-control
history (nothing can be read out of old commits, reflogs or packed refs), the
task's assets (reused read-only), and the candidate directory the Migrator writes.
`role_boundary` and `grader_boundary` are the only places that decide which of
these a command sees, and where.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from benchmark_adapter.task import Task
from harness.boundary import Boundary, Limits, Mount
from harness.errors import TwinError
from harness.sandbox.packages import cache_root

# Names never copied from the source repository: version-control state and pointers elsewhere.
VCS_NAMES = frozenset({".git", ".gitmodules", ".hg", ".hgsub", ".svn", ".bzr", ".jj"})
_SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_ENTRIES = (
    "passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "ssl/certs", "ssl/openssl.cnf", "pki", "ca-certificates", "alternatives",
    "fonts", "mime.types",
)  # fmt: skip
_COMPLETE = ".source-complete"


class WorkspaceError(TwinError):
    """The workspace could not be prepared (unreadable source, no space, bad root)."""


class Workspace(BaseModel):
    """Host directories of one run's workspace."""

    root: Path = Field(description="The workspace directory.")
    source: Path = Field(
        description="Copy of the original repository, without history (read-only inside)."
    )
    assets: Path | None = Field(
        default=None, description="The task's assets, reused read-only (None: none)."
    )
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


def python_mounts() -> list[Mount]:
    """Read-only mounts that run this interpreter and its environment inside, at the same paths.

    The interpreter's prefixes (the venv and the Python it was made from), the system
    roots (`/usr`, `/lib*`, `/bin`) and the parts of `/etc` programs need; never the
    repository around a venv that lives inside it, never the rest of `/etc`.
    """
    roots: list[Path] = []
    for prefix in {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parents[1])}:
        roots.append(Path(prefix).resolve())
    mounts = [Mount(host=Path(p).resolve(), inside=p) for p in _SYSTEM_ROOTS if Path(p).exists()]
    covered = [m.host for m in mounts]
    for root in sorted(set(roots)):
        if not any(root == c or c in root.parents for c in covered):
            mounts.append(Mount(host=root, inside=str(root)))
            covered.append(root)
    etc = etc_snapshot()
    if etc is not None:
        mounts.append(Mount(host=etc, inside="/etc"))
    return mounts


def etc_snapshot() -> Path | None:
    """A copy of the parts of `/etc` programs need, and nothing else (no shadow, no keys).

    One mount of a small directory instead of a mount per file: every bind mount adds
    to the start-up time of each command. Rebuilt when any copied entry changes.
    """
    entries = [Path("/etc") / name for name in _ETC_ENTRIES]
    entries = [p for p in entries if p.exists()]
    if not entries:
        return None
    stamp = "\0".join(f"{p}:{p.stat().st_mtime_ns}:{p.stat().st_size}" for p in entries)
    target = cache_root() / "etc" / hashlib.sha256(stamp.encode()).hexdigest()[:16]
    if target.is_dir():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".etc-", dir=target.parent))
        for path in entries:
            dest = staging / path.relative_to("/etc")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                dest.symlink_to(os.readlink(path))
            elif path.is_dir():
                shutil.copytree(path, dest, symlinks=True)
            else:
                shutil.copy2(path, dest)
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # built at the same time elsewhere
    except OSError as exc:
        raise WorkspaceError(
            f"cannot prepare the sandbox's /etc in {target.parent}: {exc}"
        ) from None
    return target


def default_limits() -> Limits:
    """`Limits()` with room for the threads numerical libraries start per core.

    The process cap counts threads; XLA and BLAS start several pools of one thread per
    core, so a fixed 256 would fail on large machines.
    """
    return Limits(max_procs=max(Limits().max_procs, 16 * (os.cpu_count() or 1)))


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
    """The boundary of a role or probe: source and assets read-only, the candidate at /app.

    Args:
        side: "candidate" hides the task's forbidden packages (torch); "reference" hides none.
        write_candidate: only the Migrator writes the candidate.
    """
    settings = task.settings
    mounts = [*python_mounts(), Mount(host=ws.source, inside=settings.source_mount)]
    if ws.assets is not None:
        mounts.append(Mount(host=ws.assets, inside=settings.assets_mount))
    mounts.append(
        Mount(host=ws.candidate, inside=settings.candidate_mount, writable=write_candidate)
    )
    mounts += layout_mounts(task, aliases=True, workspace=ws)
    mounts += list(extra_mounts)
    return Boundary(
        name=name,
        mounts=mounts,
        hidden=[*task.hidden_roots, *_run_files(ws, audit_log)],
        hidden_packages=list(settings.forbidden_packages) if side == "candidate" else [],
        network=settings.allow_network,
        env=task.environment.env if task.environment is not None else {},
        limits=limits or default_limits(),
        workdir=settings.candidate_mount,
        audit_log=audit_log,
    )


def grader_boundary(
    task: Task, candidate: Path, logs_dir: Path, *, audit_log: Path | None
) -> Boundary:
    """The boundary of the task's unchanged grader.

    The candidate at /app (read-only), the task's tests at /tests (read-only), assets at
    /assets, `logs_dir` at /logs/verifier (the only writable root); forbidden packages
    hidden; no network. Capabilities are kept inside a user namespace so that test.sh
    can sandbox the candidate again (nested bubblewrap).
    """
    settings = task.settings
    logs_dir = Path(logs_dir)
    logs_dir.mkdir(parents=True, exist_ok=True)
    mounts = [
        *python_mounts(),
        Mount(host=Path(candidate), inside=settings.candidate_mount),
        Mount(host=task.tests_dir, inside="/tests"),
        Mount(host=logs_dir, inside="/logs/verifier", writable=True),
    ]
    if task.assets_dir is not None and task.assets_dir.is_dir():
        mounts.append(Mount(host=task.assets_dir, inside=settings.assets_mount))
    if task.environment is not None:  # /app as the Dockerfile lays it out, the original included
        mounts.append(Mount(host=task.source_dir, inside=settings.source_mount))
        mounts += layout_mounts(task, aliases=False)
    hidden = [p for p in task.hidden_roots if p.resolve() != task.tests_dir.resolve()]
    if audit_log is not None:
        hidden.append(audit_log)
    return Boundary(
        name="grader",
        mounts=mounts,
        hidden=hidden,
        hidden_packages=list(settings.forbidden_packages),
        network=False,
        env=task.environment.env if task.environment is not None else {},
        limits=default_limits().model_copy(update={"wall_s": task.verifier_timeout_s}),
        workdir="/tests",
        audit_log=audit_log,
        nested_sandbox=True,
    )


def layout_mounts(task: Task, *, aliases: bool, workspace: Workspace | None = None) -> list[Mount]:
    """A published task's other laid-out files, read-only where its Dockerfile puts them.

    With `aliases`, the original and the assets also appear at `/source` and `/assets`,
    where the roles' prompts say they are (a role sees both paths; probes and the
    grader see only the Dockerfile's).
    """
    if task.environment is None:
        return []
    mounts = [Mount(host=laid.host, inside=laid.inside) for laid in task.extra_layout]
    if aliases and workspace is not None:
        if task.settings.source_mount != "/source":
            mounts.append(Mount(host=workspace.source, inside="/source"))
        if workspace.assets is not None and task.settings.assets_mount != "/assets":
            mounts.append(Mount(host=workspace.assets, inside="/assets"))
    return mounts


def _run_files(ws: Workspace, audit_log: Path | None) -> list[Path]:
    """The run's own files (evidence, trajectories, logs, grades): never visible.

    Everything in the workspace root and in the audit log's directory (the run
    directory) except the workspace's visible roots and the directories holding them.
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
    return files
