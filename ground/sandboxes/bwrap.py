"""The bubblewrap sandbox: Linux namespaces, only the boundary's roots mounted.

Inside, the filesystem is built from nothing: the boundary's mounts (read-only
unless writable), a private `/tmp`, a fresh `/proc` of a new PID namespace and a
minimal `/dev`. Hidden roots are never mounted (and are covered where they lie
under a mount); hidden packages are removed from site-packages. The network is
a new, empty namespace unless the boundary allows it. The environment is built
from scratch.

bubblewrap always runs unprivileged: as twin's own uid, or, when twin is root, as
the sandbox uid through `setpriv` (`privilege.py`), so nothing inside is ever host
root or holds a capability. Every command loads the seccomp filter (`seccomp.py`),
which also refuses further user namespaces, except in a grader boundary whose
`test.sh` starts its own nested bubblewrap. `/tmp` is a tmpfs of `Limits.tmp_mb`, `/dev/shm`
one of `Limits.shm_mb` (both noexec, `/dev` read-only and memory files refused where the boundary
is code-confined: a non-executable root's files load neither in place nor copied); writable
roots live on filesystems of `Limits.disk_mb` where twin can mount them (`quota.py`), and are
watched against it. The per-process limits (memory, file size,
no core files, processes counted in the sandbox's own user namespace) are set from outside on
the sandbox, held before its command starts (`gate.py`); nothing runs in front of the command.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from pathlib import Path

from ground.boundary import Boundary, Limits
from ground.isolation import SANDBOX_GID, SANDBOX_UID, cache_root
from ground.sandbox import ExecResult, SandboxError
from ground.sandboxes.base import BoundarySandbox, PresentedRoots, sandbox_env
from ground.sandboxes.disk import DiskWatch
from ground.sandboxes.gate import LaunchGate
from ground.sandboxes.packages import copied_inside, hidden_entries, pruned_site_dir, site_dirs
from ground.sandboxes.presentation import RootOverCaps
from ground.sandboxes.privilege import Staging, dropping_root, settle_writable, unprivileged_exec
from ground.sandboxes.process import run_limited
from ground.sandboxes.seccomp import filter_file


def seccomp_profile(boundary: Boundary) -> str:
    """The filter a boundary's commands load: `nested` for a grader, `confined` for a code-confined
    boundary (no memory files), `strict` otherwise (`seccomp.py`)."""
    if boundary.nested_sandbox:
        return "nested"
    return "confined" if boundary.code_confined else "strict"


def bwrap_path() -> str | None:
    """Where bubblewrap is installed, if it is."""
    return shutil.which("bwrap")


class BwrapSandbox(BoundarySandbox):
    """Runs commands in a bubblewrap sandbox built from a `Boundary`.

    Failures of the command (non-zero exit, time-out, output cut) come back in the
    `ExecResult`; a path the boundary refuses raises `BoundaryViolation`; a sandbox
    that cannot be started raises `SandboxError`.
    """

    def __init__(self, boundary: Boundary) -> None:
        executable = bwrap_path()
        if executable is None:
            raise SandboxError("bubblewrap (bwrap) is not installed: install it or pass --sandbox none")
        self._bwrap = executable
        self._staging = Staging()
        self._seccomp = filter_file(seccomp_profile(boundary), cache_root() / "seccomp")
        self._filter = self._seccomp.read_bytes()  # handed to each command through its gate
        roots = PresentedRoots(boundary)
        super().__init__(boundary, roots)
        self._presenter = roots.presenter
        self._bound = self._presenter.boundary()  # as bound: roots from their neutral slots
        try:
            self._prefix = self._build_prefix()
        except BaseException:
            self.close()
            raise
        self._root_workdir = self._checked_root_workdir()

    # ---- building the command line --------------------------------------------------------------
    def _build_prefix(self) -> list[str]:
        b = self._bound
        args = [
            self._bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--cap-drop",
            "ALL",
        ]
        # Further user namespaces are refused by the seccomp filter (unshare/clone with
        # CLONE_NEWUSER, clone3); bwrap's --disable-userns would cost another namespace per command.
        if not b.network:
            args.append("--unshare-net")
        # /proc, /dev and the private /tmp first, so that a root granted under /tmp (a venv or a
        # checkout that lives there) is bound on top of the tmpfs instead of hidden by it.
        args += ["--proc", "/proc", "--dev", "/dev", *self._scratch_space(b.limits)]
        for mount in sorted(b.mounts, key=lambda m: len(m.inside)):
            if not mount.host.exists():
                raise SandboxError(f"boundary {b.name}: mount source {mount.host} does not exist")
            link = self._same_symlink(mount)
            if link is not None:
                args += ["--symlink", link, mount.inside]
                continue
            source = self._staging.path(mount.host)
            if not mount.executable:
                self._staging.noexec(source)
            args += ["--bind" if mount.writable else "--ro-bind", str(source), mount.inside]
        args += self._cover_hidden()
        args += self._hide_packages()
        args += ["--remount-ro", "/"]  # only the writable mount and /tmp take writes
        # The launcher: staged mounts (as root, or in a user namespace of their own), then the uid
        # switch, which becomes bubblewrap.
        launch = [*self._staging.prefix(), *unprivileged_exec(self._bwrap)]
        return [*launch, *self._staging.bwrap_identity(), *args[1:]]

    def _scratch_space(self, limits: Limits) -> list[str]:
        """The private `/dev/shm` and `/tmp`, tmpfs of `Limits.shm_mb` and `Limits.tmp_mb`.

        In a code-confined boundary (`Boundary.code_confined`) both are mounted noexec before
        bubblewrap starts (it has no such flag) and `/dev` is read-only, so no file a command
        writes, or copies from a non-executable root, can be mapped as code.
        """
        sizes = (("/dev/shm", limits.shm_mb << 20), ("/tmp", limits.tmp_mb << 20))
        if not self.boundary.code_confined:
            return [word for inside, size in sizes for word in ("--size", str(size), "--tmpfs", inside)]
        owner = f",uid={SANDBOX_UID},gid={SANDBOX_GID}" if dropping_root() else ""
        args: list[str] = []
        for inside, size in sizes:
            point = self._staging.tmpfs(f"size={size},mode=0755{owner},nosuid,nodev,noexec")
            args += ["--bind", str(point), inside]
            if inside == "/dev/shm":
                args += ["--remount-ro", "/dev"]
        return args

    def _same_symlink(self, mount) -> str | None:
        """The host's link text where a mount repeats a host symlink (`/bin` -> `usr/bin`).

        A symlink inside is cheaper than another bind mount, and it is exactly what the
        host has, provided the target is mounted at its own path.
        """
        if mount.writable or not mount.executable or not os.path.islink(mount.inside):
            return None
        if Path(os.path.realpath(mount.inside)) != mount.host:
            return None
        if self._inside_of_other(mount) != str(mount.host):
            return None
        return os.readlink(mount.inside)

    def _inside_of_other(self, skip) -> str | None:
        for mount in self._bound.mounts:
            if mount is skip:
                continue
            if skip.host == mount.host or mount.host in skip.host.parents:
                return os.path.normpath(f"{mount.inside}/{skip.host.relative_to(mount.host)}")
        return None

    def _cover_hidden(self) -> list[str]:
        """Cover hidden roots that lie under a mounted root (an empty, read-only layer)."""
        args: list[str] = []
        for hidden, bound in self._presenter.hidden_pairs:
            inside = self._bound.inside_of(bound) if bound is not None else None  # None: not in a snapshot
            if inside is None or not hidden.exists():
                continue
            if hidden.is_dir():
                args += ["--tmpfs", inside, "--remount-ro", inside]
            else:
                args += ["--ro-bind", "/dev/null", inside]
        return args

    def _hide_packages(self) -> list[str]:
        """Replace every site-packages holding a hidden package by a separate, pruned copy.

        Raises:
            SandboxError: the copy cannot be made (never fall back to a weaker hiding).
        """
        packages = tuple(sorted(self.boundary.hidden_packages))
        if not packages:
            return []
        args: list[str] = []
        for site_dir in site_dirs():
            inside = self._bound.inside_of(site_dir) or copied_inside(self._bound.mounts, site_dir)
            if inside is None:
                continue
            drop = hidden_entries(site_dir, packages)
            if not drop:
                continue
            pruned = pruned_site_dir(site_dir, drop)
            if pruned is None:
                raise SandboxError(
                    f"cannot build the copy of {site_dir} without {', '.join(packages)} "
                    f"under {cache_root()}: set TWIN_CACHE_DIR to a writable directory"
                )
            args += ["--ro-bind", str(self._staging.path(pruned)), inside]
        return args

    def _checked_root_workdir(self) -> str | None:
        """The default working directory, checked once, where it is a mounted root itself.

        Below a mounted root a command could swap a directory for a link, so a working
        directory there is checked before every command; a mounted root is the harness's
        own directory, which no command can replace.
        """
        workdir = posixpath.join(self.boundary.workdir, ".")
        mount = self.boundary.mount_for(os.path.normpath(workdir))
        if mount is None or os.path.normpath(workdir) != mount.inside:
            return None
        self.boundary.to_host(workdir)
        return workdir

    # ---- the protocol ---------------------------------------------------------------------------
    def exec(
        self,
        command: list[str] | str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run `command` (argv list, or a string run by `bash -c`) inside the sandbox.

        A read-only root that grew over the snapshot caps since the sandbox was built is the
        command's failure: it does not run, and the result says which root (`exceeded`).
        """
        self._refuse_if_closed()
        workdir = posixpath.join(self.boundary.workdir, cwd or ".")
        if workdir != self._root_workdir and self.boundary.mount_for(os.path.normpath(workdir)) is not None:
            self.boundary.to_host(workdir)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise SandboxError("empty command")
        writable = [m.host for m in self._bound.mounts if m.writable]
        try:
            self._presenter.enter()
        except RootOverCaps as over:  # the agent's tree grew over the caps: this command fails
            return over.result()
        gate = None
        try:
            disk = DiskWatch.of(self._bound.mounts, self.boundary.limits.disk_mb)
            limits = disk.budgeted(self._limits(timeout_s))
            for root in writable:
                settle_writable(root)
            gate = LaunchGate(self._filter)
            return run_limited(
                [*self._prefix, *gate.options(), "--chdir", workdir, "--", *argv],
                env=sandbox_env(self.boundary, env),
                cwd="/",
                limits=limits,
                stdin=stdin,
                disk=disk if writable else None,
                gate=gate,
            )
        finally:
            if gate is not None:
                gate.close()
            for root in writable:
                settle_writable(root)
            self._presenter.leave()

    def _limits(self, timeout_s: float | None) -> Limits:
        if timeout_s is None:
            return self.boundary.limits
        return self.boundary.limits.model_copy(update={"wall_s": timeout_s})

    def _release(self) -> None:
        """Nothing outlives a command (the PID namespace dies with it); remove the staging points."""
        self._staging.close()
