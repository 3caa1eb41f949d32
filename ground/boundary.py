"""The information boundary: one object that decides what a role, tool or command may see or do.

Every sandbox is built from a `Boundary`; every file a tool reads or writes is
checked here first. Paths are resolved (symlinks, `..`, `/proc/self/root`) before
they are compared. Each refusal is one line in the run's audit log.

Paths are resolved in the sandbox's own namespace: a symlink planted in the
candidate that points at `/tests/x` means `/tests/x` *inside*, which is not
mounted and is refused, exactly as the kernel would refuse it in the sandbox.
The host path reached at the end is checked again (inside a mount, not under a
hidden root, not a hard link to a hidden file) before anything is opened.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field, PrivateAttr

from ground.errors import TwinError

# Environment variable names that may carry credentials; never copied into a sandbox.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
_PROC_ROOT = re.compile(r"^/proc/(self|thread-self|\d+)/(root|cwd)(?=/|$)")
_MAX_SYMLINKS = 40


class BoundaryViolation(TwinError):
    """A request the boundary refused (reading a hidden root, writing outside the writable one)."""


class Mount(BaseModel):
    """A host directory or file made visible inside the sandbox."""

    host: Path = Field(description="Path on the host (resolved when the boundary is built).")
    inside: str = Field(description="Absolute path where it appears inside the sandbox.")
    writable: bool = Field(default=False, description="Read-write (only the candidate, for the Migrator).")
    executable: bool = Field(
        default=True,
        description=(
            "False: a root another sandbox wrote (a role's /scratch on its candidate side), from which no"
            " native code may be loaded: mounted noexec, and the whole sandbox is code-confined"
            " (`Boundary.code_confined`), so a copy elsewhere inside cannot be loaded either."
        ),
    )


class Limits(BaseModel):
    """Resource limits of one command."""

    wall_s: float = Field(default=600.0, description="Wall time; the process group is killed after it.")
    memory_mb: int = Field(default=8192, description="Address-space limit per process.")
    max_procs: int = Field(default=256, description="Processes/threads the command may create.")
    output_bytes: int = Field(default=200_000, description="Output kept (head and tail) per stream.")
    tmp_mb: int = Field(default=1024, description="Size of the private /tmp (a tmpfs).")
    shm_mb: int = Field(default=64, description="Size of the private /dev/shm (a tmpfs; Docker's default).")
    disk_mb: int = Field(
        default=2048,
        description="Disk a writable root may hold, and the largest file a command may write.",
    )
    file_mb: int | None = Field(
        default=None,
        description=(
            "Largest file one command may write (default `disk_mb`). The sandboxes lower it to what"
            " is left under the disk cap before each command, so a root over its cap cannot grow."
        ),
    )

    def file_bytes(self) -> int:
        """The per-file size cap (`RLIMIT_FSIZE`) in bytes."""
        return (self.disk_mb if self.file_mb is None else self.file_mb) << 20


class Boundary(BaseModel):
    """What one role, tool or command may see, write and reach."""

    name: str = Field(description="Who this boundary is for, e.g. 'migrator', 'verifier:candidate', 'grader'.")
    mounts: list[Mount] = Field(default_factory=list, description="Readable roots; at most one writable.")
    hidden: list[Path] = Field(
        default_factory=list,
        description="Host paths that must never be visible (tests, solution, run files).",
    )
    hidden_packages: list[str] = Field(
        default_factory=list,
        description=("Top-level Python packages physically absent inside (import raises ModuleNotFoundError)."),
    )
    network: bool = Field(default=False, description="Whether any network is reachable.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment set inside, explicitly.")
    env_allow: list[str] = Field(
        default_factory=list,
        description="Names copied from the harness environment (never API keys).",
    )
    limits: Limits = Field(default_factory=Limits)
    workdir: str = Field(default="/", description="Default working directory inside.")
    audit_log: Path | None = Field(default=None, description="Where refusals are appended.")
    nested_sandbox: bool = Field(
        default=False,
        description=(
            "Keep the capabilities a nested bubblewrap needs (inside a user namespace only). "
            "For the grader, whose test.sh sandboxes the candidate itself; never for roles."
        ),
    )
    image: str | None = Field(
        default=None,
        description=(
            "The image a container sandbox runs on: a published task's own, built from its environment/ "
            "(`Task.image`). None: the sandbox's default. Sandboxes without images lay the files out."
        ),
    )

    _hidden_inodes: set[tuple[int, int]] | None = PrivateAttr(default=None)

    def model_post_init(self, _context: object) -> None:
        writable = [m for m in self.mounts if m.writable]
        if len(writable) > 1:
            raise ValueError(f"boundary {self.name}: more than one writable root")
        if writable and self.code_confined:
            raise ValueError(
                f"boundary {self.name}: a writable root beside a non-executable one would let its files be loaded"
            )
        for mount in self.mounts:
            mount.host = Path(os.path.realpath(mount.host))
            if not PurePosixPath(mount.inside).is_absolute():
                raise ValueError(f"boundary {self.name}: mount point {mount.inside} is not absolute")
            mount.inside = os.path.normpath(mount.inside)
        self.hidden = [Path(os.path.realpath(p)) for p in self.hidden]
        for mount in self.mounts:
            if self.is_hidden(mount.host):
                raise ValueError(f"boundary {self.name}: mount {mount.inside} lies in a hidden root")
        for name in [*self.env_allow, *self.env]:
            if SECRET_NAME.search(name):
                raise ValueError(f"boundary {self.name}: environment variable {name} looks like a secret")
        if not PurePosixPath(self.workdir).is_absolute():
            raise ValueError(f"boundary {self.name}: workdir {self.workdir} is not absolute")

    @property
    def code_confined(self) -> bool:
        """Whether native code may be loaded only from the roots given as executable.

        True where any root is not executable (files the other side wrote): then nothing written
        inside can be mapped as code either (`/tmp`, `/dev/shm` noexec, `/dev` read-only,
        `memfd_create` refused), so copying a shared object out of that root loads nothing.
        """
        return any(not mount.executable for mount in self.mounts)

    # ---- path mapping -------------------------------------------------------------------------
    def mount_for(self, inside_path: str) -> Mount | None:
        """The innermost mount containing a normalised inside path, if any."""
        pure = PurePosixPath(inside_path)
        for mount in sorted(self.mounts, key=lambda m: len(m.inside), reverse=True):
            root = PurePosixPath(mount.inside)
            if pure == root or root in pure.parents:
                return mount
        return None

    def _host_of(self, inside_path: str) -> Path | None:
        mount = self.mount_for(inside_path)
        if mount is None:
            return None
        return mount.host / PurePosixPath(inside_path).relative_to(mount.inside)

    def resolve_inside(self, inside_path: str) -> str:
        """Resolve `..`, `/proc/self/root` and symlinks the way the sandbox's kernel would.

        Relative paths are taken from `workdir`. Symlink targets are read on the host but
        interpreted inside (an absolute target starts again at the sandbox's `/`).

        Raises:
            BoundaryViolation: a symlink loop, or a link that leaves every mount.
        """
        path = _PROC_ROOT.sub(lambda m: "" if m.group(2) == "root" else self.workdir, inside_path)
        if not path.startswith("/"):
            path = self.workdir.rstrip("/") + "/" + path
        pending = [p for p in path.split("/") if p]
        done: list[str] = []
        followed = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join([*done, part])
            host = self._host_of(candidate)
            if host is not None and host.is_symlink():
                followed += 1
                if followed > _MAX_SYMLINKS:
                    self.refuse("resolve", inside_path, "too many symbolic links")
                target = os.readlink(host)
                if target.startswith("/"):
                    done = []
                pending = [p for p in target.split("/") if p] + pending
                continue
            done.append(part)
        return "/" + "/".join(done)

    def to_host(self, inside_path: str) -> tuple[Path, Mount]:
        """Map a path inside the sandbox to the host, resolving `..` and symlinks.

        Raises:
            BoundaryViolation: the path is outside every mount, or resolves into a hidden root
                or outside the mount it started in.
        """
        resolved_inside = self.resolve_inside(inside_path)
        mount = self.mount_for(resolved_inside)
        if mount is None:
            self.refuse("resolve", inside_path, "outside every mounted root")
            raise AssertionError("unreachable")
        host = mount.host / PurePosixPath(resolved_inside).relative_to(mount.inside)
        resolved = Path(os.path.realpath(host))
        if not (resolved == mount.host or mount.host in resolved.parents):
            self.refuse("resolve", inside_path, f"resolves outside {mount.inside}")
        if self.is_hidden(resolved):
            self.refuse("resolve", inside_path, "resolves into a hidden root")
        if self.is_hidden_inode(resolved):
            self.refuse("resolve", inside_path, "is a hard link to a hidden file")
        return resolved, mount

    def inside_of(self, host_path: Path) -> str | None:
        """Where a host path appears inside: through the innermost mount that contains it (None: none does).

        The inverse of `to_host` for paths the sandbox builds its command line from (site
        directories, hidden roots, programs); nothing is resolved or refused here.
        """
        innermost = None
        for mount in self.mounts:
            if host_path == mount.host or mount.host in host_path.parents:
                if innermost is None or len(mount.host.parts) > len(innermost.host.parts):
                    innermost = mount
        if innermost is None:
            return None
        return os.path.normpath(f"{innermost.inside}/{host_path.relative_to(innermost.host)}")

    def is_hidden(self, host_path: Path) -> bool:
        """Whether a resolved host path is, or lies under, a hidden root."""
        return any(host_path == h or h in host_path.parents for h in self.hidden)

    def is_hidden_inode(self, host_path: Path) -> bool:
        """Whether a host file with several links shares its inode with a file in a hidden root."""
        try:
            st = os.lstat(host_path)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            return False
        if self._hidden_inodes is None:
            self._hidden_inodes = _inodes_under(self.hidden)
        return (st.st_dev, st.st_ino) in self._hidden_inodes

    def check_read(self, inside_path: str) -> Path:
        """Return the host path of a readable file, or refuse."""
        host, _ = self.to_host(inside_path)
        return host

    def check_write(self, inside_path: str) -> Path:
        """Return the host path of a writable location, or refuse."""
        host, mount = self.to_host(inside_path)
        if not mount.writable:
            self.refuse("write", inside_path, f"{mount.inside} is read-only for {self.name}")
        if host.is_file() and os.stat(host).st_nlink > 1:
            self.refuse("write", inside_path, "file has several hard links (could alias a hidden file)")
        return host

    # ---- audit --------------------------------------------------------------------------------
    def refuse(self, action: str, target: str, reason: str) -> None:
        """Write one audit line and raise `BoundaryViolation`."""
        self.audit(action, target, reason)
        raise BoundaryViolation(f"{self.name} may not {action} {target}: {reason}")

    def audit(self, action: str, target: str, reason: str) -> None:
        """Append one refusal line to the audit log (JSON, one object per line)."""
        if self.audit_log is None:
            return
        line = json.dumps(
            {
                "time": time.time(),
                "boundary": self.name,
                "action": action,
                "target": target,
                "reason": reason,
            }
        )
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.audit_log, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def _inodes_under(roots: list[Path]) -> set[tuple[int, int]]:
    """(device, inode) of every regular file under the given roots."""
    found: set[tuple[int, int]] = set()
    for root in roots:
        paths = [root] if root.is_file() else (p for p in root.rglob("*") if p.is_file())
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found
