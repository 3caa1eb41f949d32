"""The isolation policy: one set of functions that decides every sandbox's boundary.

Role, probe-side, grader and solve.sh sandboxes are all built here, from the same parts:
the interpreter and system roots (read-only, `/etc` from a snapshot), the task's
visible roots at their mount points, one writable root at most, the hidden roots,
the packages that must be physically absent, the network switch and the limits
(time, memory, processes, output, `/tmp` size, disk). Which host uid runs the
sandbox (`SANDBOX_UID` whenever twin is root) and which kernel interfaces it may
use are decided by the sandbox implementations from the boundary these functions
return (`ground/sandboxes/privilege.py`, `ground/sandboxes/seccomp.py`).

What a task gives a sandbox read-only (tests/, the original, the assets, the laid-out
files, the solution) is mounted from a view the sandbox uid can read, as Harbor's root
could (`ground.views`); the candidate keeps its own modes.

This module sits on the ground floor: it imports only `ground.boundary`,
`ground.views` and `ground.host_dirs` (where twin keeps its own files on
the host), never the loop, the roles, the probes or the task loader.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ground.boundary import Boundary, Limits, Mount
from ground.host_dirs import IsolationError, cache_root, stage_root
from ground.views import interpreter_copy, readable_mounts

Side = Literal["reference", "candidate"]
# The unprivileged host uid/gid every sandbox runs as when twin runs as root (nobody).
SANDBOX_UID = 65534
SANDBOX_GID = 65534
PROBE_WORK = "/probe"
PROBE_GIVEN = "/probe-given"
GRADER_TESTS = "/tests"
GRADER_LOGS = "/logs/verifier"
REFERENCE_SITE = "/opt/twin-reference/site-packages"  # the original's reference environment, inside
_SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_ENTRIES = (
    "passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "ssl/certs", "ssl/openssl.cnf", "pki", "ca-certificates", "alternatives",
    "fonts", "mime.types",
)  # fmt: skip


class Layout(BaseModel):
    """Where a task's visible parts lie on the host and where they appear inside a sandbox."""

    candidate: Path = Field(description="The candidate work tree on the host.")
    candidate_mount: str = Field(default="/app", description="Where the candidate appears.")
    source: Path | None = Field(default=None, description="The original (a copy without history).")
    source_mount: str = Field(default="/source", description="Where the original appears.")
    assets: Path | None = Field(default=None, description="The task's assets, if any.")
    assets_mount: str = Field(default="/assets", description="Where the assets appear.")
    hidden: list[Path] = Field(
        default_factory=list, description="The task's hidden roots (tests, solution, task.toml)."
    )
    forbidden_packages: list[str] = Field(
        default_factory=lambda: ["torch"], description="Absent on the candidate side and in grading."
    )
    network: bool = Field(default=False, description="Whether the task allows a network.")
    laid_out: list[Mount] = Field(
        default_factory=list,
        description="A published task's other files, read-only where its Dockerfile puts them.",
    )
    role_aliases: list[Mount] = Field(
        default_factory=list,
        description="Roles only: the original and the assets again where the roles' prompts say they are.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="The task image's ENV (published tasks).")
    image: str | None = Field(
        default=None, description="The image built for a published task (docker sandbox), passed to every boundary."
    )
    reference_site: Path | None = Field(
        default=None, description="The original's reference environment (reference side and grader only)."
    )


# ---- the fixed parts ---------------------------------------------------------------------------


def python_mounts() -> list[Mount]:
    """Read-only mounts that run this interpreter and its environment inside, at the same paths.

    The interpreter's prefixes (the venv and the Python it was made from), the system
    roots (`/usr`, `/lib*`, `/bin`) and the parts of `/etc` programs need; never the
    repository around a venv that lives inside it, never the rest of `/etc`.
    """
    roots = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parents[1])}]
    mounts = [Mount(host=Path(p).resolve(), inside=p) for p in _SYSTEM_ROOTS if Path(p).exists()]
    covered = [m.host for m in mounts]
    for root in sorted(set(roots)):
        if not any(root == c or c in root.parents for c in covered):
            mounts.append(Mount(host=_reachable_copy(root), inside=str(root)))
            covered.append(root)
    etc = etc_snapshot()
    if etc is not None:
        mounts.append(Mount(host=etc, inside="/etc"))
    return mounts


def reachable(path: Path, uid: int = SANDBOX_UID, gid: int = SANDBOX_GID) -> bool:
    """Whether `uid` can reach `path` (search permission on every directory above it)."""
    for parent in reversed(Path(path).parents):
        try:
            st = os.stat(parent)
        except OSError:
            return False
        bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _reachable_copy(root: Path) -> Path:
    """`root` itself, or (twin as root, `root` closed to the sandbox uid) a cached copy of it.

    An interpreter installed under `/root` (pyenv) cannot be mounted by an unprivileged
    bubblewrap; staging it for every command costs a private mount namespace per command,
    so its read-only tree is copied once instead (`ground.views.interpreter_copy`).
    """
    if os.geteuid() != 0 or reachable(root):
        return root
    try:
        return interpreter_copy(root, cache=cache_root())
    except OSError as exc:
        raise IsolationError(f"cannot copy {root} where the sandbox can reach it: {exc}") from None


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
        raise IsolationError(f"cannot prepare the sandbox's /etc in {target.parent}: {exc}") from None
    return target


def default_limits() -> Limits:
    """`Limits()` with room for the threads numerical libraries start per core.

    The process cap counts threads; XLA and BLAS start several pools of one thread per
    core, so a fixed 256 would fail on large machines.
    """
    return Limits(max_procs=max(Limits().max_procs, 16 * (os.cpu_count() or 1)))


def reference_env_parts(layout: Layout, *, isolated: bool = True) -> tuple[list[Mount], dict[str, str]]:
    """The read-only mount and PYTHONPATH of the original's reference environment (`task_model.reference_env`).

    First on PYTHONPATH: the original's pins win on its side. A PYTHONPATH entry's `.pth` files are never read.
    """
    if layout.reference_site is None:
        return [], {}
    inside = REFERENCE_SITE if isolated else str(layout.reference_site)
    return [Mount(host=layout.reference_site, inside=inside)], {"PYTHONPATH": inside}


# ---- the boundaries ----------------------------------------------------------------------------
def role_boundary(
    layout: Layout,
    *,
    name: str,
    write_candidate: bool,
    side: Side,
    audit_log: Path | None,
    run_files: Sequence[Path] = (),
    extra_mounts: Sequence[Mount] = (),
    limits: Limits | None = None,
) -> Boundary:
    """A role's boundary: source and assets read-only, the candidate at its mount.

    Args:
        write_candidate: only the Migrator writes the candidate.
        side: "candidate" hides the forbidden packages (torch); "reference" hides none.
        run_files: the run's own files (evidence, trajectories, logs): never visible.
    """
    given = []
    if layout.source is not None:
        given.append(Mount(host=layout.source, inside=layout.source_mount))
    if layout.assets is not None:
        given.append(Mount(host=layout.assets, inside=layout.assets_mount))
    mounts = [
        *python_mounts(),
        *_given(given, layout.hidden),
        Mount(host=layout.candidate, inside=layout.candidate_mount, writable=write_candidate),
        *_given([*layout.laid_out, *layout.role_aliases], layout.hidden),
        *extra_mounts,
    ]
    extra, reference_env = reference_env_parts(layout) if side == "reference" else ([], {})
    return Boundary(
        name=name,
        mounts=[*mounts, *extra],
        hidden=[*layout.hidden, *run_files],
        hidden_packages=list(layout.forbidden_packages) if side == "candidate" else [],
        network=layout.network,
        env={**layout.env, **reference_env},
        limits=limits or default_limits(),
        workdir=layout.candidate_mount,
        audit_log=audit_log,
        image=layout.image,
    )


def probe_boundary(
    layout: Layout,
    *,
    side: Side,
    work: Path,
    given: Path,
    audit_log: Path | None,
    env: dict[str, str],
    wall_s: float,
    isolated: bool = True,
) -> Boundary:
    """One side of a matched probe: its own work directory, what it is given, its own root.

    The reference side sees the original, the candidate side the candidate; both see
    the assets. `work` (writable, at `PROBE_WORK`) belongs to this side alone; `given`
    (read-only, at `PROBE_GIVEN`) holds the probe file, the driver and the inputs
    handed over. Nothing of the other side is mounted. With `isolated=False` (the
    `none` sandbox, tests only) the mounts only map paths: host paths appear as themselves.
    """
    own = layout.source if side == "reference" else layout.candidate
    own_mount = layout.source_mount if side == "reference" else layout.candidate_mount
    if not isolated:
        own_mount = str(own)
    mounts = [
        Mount(host=work, inside=PROBE_WORK if isolated else str(work), writable=True),
        Mount(host=given, inside=PROBE_GIVEN if isolated else str(given)),
    ]
    if own is not None:
        mount = Mount(host=own, inside=own_mount)
        mounts += _given([mount], layout.hidden) if side == "reference" and isolated else [mount]
    if layout.assets is not None:
        mount = Mount(host=layout.assets, inside=layout.assets_mount if isolated else str(layout.assets))
        mounts += _given([mount], layout.hidden) if isolated else [mount]
    if isolated:
        mounts = [*python_mounts(), *mounts, *_given(layout.laid_out, layout.hidden)]
    if side == "reference":
        extra, reference_env = reference_env_parts(layout, isolated=isolated)
        mounts += extra
        env = {**env, **reference_env}
    return Boundary(
        name=f"probe:{side}",
        mounts=mounts,
        # A candidate the user points at inside a hidden root (the oracle under
        # solution/) stays visible; everything else hidden stays hidden.
        hidden=[h for h in layout.hidden if not _contains(h, layout.candidate)],
        hidden_packages=list(layout.forbidden_packages) if side == "candidate" else [],
        network=False,
        env=env,
        limits=default_limits().model_copy(update={"wall_s": wall_s}),
        workdir=PROBE_WORK if isolated else str(work),
        audit_log=audit_log,
        image=layout.image,
    )


def grader_boundary(
    layout: Layout,
    *,
    tests: Path,
    logs: Path,
    audit_log: Path | None,
    wall_s: float,
) -> Boundary:
    """The task's unchanged grader: candidate and tests read-only, `logs` the only writable root.

    The forbidden packages are absent and there is no network. The grader may start
    its own, nested bubblewrap for the candidate (`nested_sandbox`): that one sandbox
    may create a user namespace, nothing more.
    """
    logs.mkdir(parents=True, exist_ok=True)
    hidden = [p for p in layout.hidden if p.resolve() != tests.resolve()]
    given = [Mount(host=tests, inside=GRADER_TESTS)]
    if layout.assets is not None:
        given.append(Mount(host=layout.assets, inside=layout.assets_mount))
    if layout.source is not None:  # a published task: /app as its Dockerfile lays it out
        given.append(Mount(host=layout.source, inside=layout.source_mount))
    mounts = [
        *python_mounts(),
        Mount(host=layout.candidate, inside=layout.candidate_mount),
        Mount(host=logs, inside=GRADER_LOGS, writable=True),
        *_given([*given, *layout.laid_out], hidden, closed=(GRADER_TESTS,)),
    ]
    extra, reference_env = reference_env_parts(layout)
    mounts += extra
    if audit_log is not None:
        hidden.append(audit_log)
    return Boundary(
        name="grader",
        mounts=mounts,
        hidden=hidden,
        hidden_packages=list(layout.forbidden_packages),
        network=False,
        env={**layout.env, **reference_env},
        limits=default_limits().model_copy(update={"wall_s": wall_s}),
        workdir=GRADER_TESTS,
        audit_log=audit_log,
        nested_sandbox=True,
        image=layout.image,
    )


def solve_boundary(layout: Layout, *, solution: Path, workdir: str | None, wall_s: float) -> Boundary:
    """A published task's `solve.sh`: the original, the assets and `/solution` read-only, the candidate writable.

    Tests and `task.toml` stay hidden, the forbidden packages absent, the network off.
    """
    hidden = [h for h in layout.hidden if h.resolve() != solution.resolve()]
    given = [] if layout.source is None else [Mount(host=layout.source, inside=layout.source_mount)]
    given += [*layout.laid_out, Mount(host=solution, inside="/solution")]
    if layout.assets is not None:
        given.append(Mount(host=layout.assets, inside=layout.assets_mount))
    mounts = [
        *python_mounts(),
        *_given(given, hidden),
        Mount(host=layout.candidate, inside=layout.candidate_mount, writable=True),
    ]
    return Boundary(
        name="solve",
        mounts=mounts,
        hidden=hidden,
        hidden_packages=list(layout.forbidden_packages),
        network=False,
        env=layout.env,
        limits=default_limits().model_copy(update={"wall_s": wall_s}),
        workdir=workdir or layout.candidate_mount,
        image=layout.image,
    )


def scratch_dir(prefix: str) -> Path:
    """A fresh directory for a sandbox's scratch (grader logs, probe work), reachable by its uid.

    Under `stage_root()` (traversable, not listable), so that no mount needs staging.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=stage_root()))
    path.chmod(0o711)  # traversable by the sandbox uid, listable by no one else
    return path


def _given(mounts: Sequence[Mount], hidden: Sequence[Path], closed: Sequence[str] = ()) -> list[Mount]:
    """What a task gives a sandbox, from views its uid can read; a grader's tests always a closed copy.

    A grader that drops its candidate's side to another uid (in a container, where its nested
    bubblewrap cannot start) relies on that closed copy (`ground.views`).
    """
    try:
        return readable_mounts(mounts, hidden, cache=cache_root(), uid=SANDBOX_UID, gid=SANDBOX_GID, closed=closed)
    except OSError as exc:
        raise IsolationError(f"cannot make the task's files readable to the sandbox in {cache_root()}: {exc}") from None


def _contains(root: Path, path: Path) -> bool:
    root, path = root.resolve(), path.resolve()
    return root == path or root in path.parents
