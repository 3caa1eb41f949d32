"""The information boundary: one object that decides what a role, tool or command may see or do.

Every sandbox is built from a `Boundary`; every file a tool reads or writes is
checked here first. Paths are resolved (symlinks, `..`, `/proc/self/root`) before
they are compared. Each refusal is one line in the run's audit log.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from harness.errors import TwinError


class BoundaryViolation(TwinError):
    """A request the boundary refused (reading a hidden root, writing outside the writable one)."""


class Mount(BaseModel):
    """A host directory or file made visible inside the sandbox."""

    host: Path = Field(description="Path on the host (resolved when the boundary is built).")
    inside: str = Field(description="Absolute path where it appears inside the sandbox.")
    writable: bool = Field(default=False, description="Read-write (only the candidate, for the Migrator).")


class Limits(BaseModel):
    """Resource limits of one command."""

    wall_s: float = Field(default=600.0, description="Wall time; the process group is killed after it.")
    memory_mb: int = Field(default=8192, description="Address-space limit per process.")
    max_procs: int = Field(default=256, description="Processes/threads the command may create.")
    output_bytes: int = Field(default=200_000, description="Output kept (head and tail) per stream.")


class Boundary(BaseModel):
    """What one role, tool or command may see, write and reach."""

    name: str = Field(description="Who this boundary is for, e.g. 'migrator', 'verifier:candidate', 'grader'.")
    mounts: list[Mount] = Field(default_factory=list, description="Readable roots; at most one writable.")
    hidden: list[Path] = Field(
        default_factory=list, description="Host paths that must never be visible (tests, solution, run files)."
    )
    hidden_packages: list[str] = Field(
        default_factory=list,
        description="Top-level Python packages physically absent inside (import raises ModuleNotFoundError).",
    )
    network: bool = Field(default=False, description="Whether any network is reachable.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment set inside, explicitly.")
    env_allow: list[str] = Field(
        default_factory=list, description="Names copied from the harness environment (never API keys)."
    )
    limits: Limits = Field(default_factory=Limits)
    workdir: str = Field(default="/", description="Default working directory inside.")
    audit_log: Path | None = Field(default=None, description="Where refusals are appended.")

    def model_post_init(self, _context: object) -> None:
        writable = [m for m in self.mounts if m.writable]
        if len(writable) > 1:
            raise ValueError(f"boundary {self.name}: more than one writable root")
        for mount in self.mounts:
            mount.host = Path(os.path.realpath(mount.host))
            if not PurePosixPath(mount.inside).is_absolute():
                raise ValueError(f"boundary {self.name}: mount point {mount.inside} is not absolute")
        self.hidden = [Path(os.path.realpath(p)) for p in self.hidden]

    # ---- path mapping -------------------------------------------------------------------------
    def to_host(self, inside_path: str) -> tuple[Path, Mount]:
        """Map a path inside the sandbox to the host, resolving `..` and symlinks.

        Raises:
            BoundaryViolation: the path is outside every mount, or resolves into a hidden root
                or outside the mount it started in.
        """
        pure = PurePosixPath(os.path.normpath("/" + inside_path.removeprefix("/proc/self/root")))
        for mount in sorted(self.mounts, key=lambda m: len(m.inside), reverse=True):
            root = PurePosixPath(mount.inside)
            if pure == root or root in pure.parents:
                host = mount.host / pure.relative_to(root)
                resolved = Path(os.path.realpath(host))
                if not (resolved == mount.host or mount.host in resolved.parents):
                    self.refuse("resolve", inside_path, f"resolves outside {mount.inside}")
                if self.is_hidden(resolved):
                    self.refuse("resolve", inside_path, "resolves into a hidden root")
                return resolved, mount
        self.refuse("resolve", inside_path, "outside every mounted root")
        raise AssertionError("unreachable")

    def is_hidden(self, host_path: Path) -> bool:
        """Whether a resolved host path is, or lies under, a hidden root."""
        return any(host_path == h or h in host_path.parents for h in self.hidden)

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
            {"time": time.time(), "boundary": self.name, "action": action, "target": target, "reason": reason}
        )
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.audit_log, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
