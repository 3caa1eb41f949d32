"""The sandbox protocol and its result type.

A sandbox is built from a `Boundary` (what may be seen, written and reached) and
runs commands inside it. Failures of the command itself (non-zero exit, time-out,
too much output) come back as an `ExecResult`; only failures of the sandbox
(it could not be started at all) raise `SandboxError`.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field

from ground.errors import TwinError


class SandboxError(TwinError):
    """The sandbox itself could not run (missing bwrap, bad mount): infrastructure, not the agent."""


class ExecResult(BaseModel):
    """The outcome of one command run in a sandbox."""

    returncode: int = Field(description="Exit status; negative for a signal, 124 for a time-out.")
    stdout: str = Field(default="", description="Standard output (head and tail if truncated).")
    stderr: str = Field(default="", description="Standard error (head and tail if truncated).")
    timed_out: bool = Field(default=False, description="The wall-time limit killed the command.")
    truncated: bool = Field(default=False, description="Output was cut to the output limit.")
    exceeded: str | None = Field(
        default=None,
        description="A disk limit the command went over ('disk: /app …'); it failed because of it.",
    )
    duration_s: float = Field(default=0.0, description="Wall time of the command.")
    limit_s: float | None = Field(default=None, description="The wall-time limit it ran under (None: not told).")
    cpu_s: float | None = Field(
        default=None,
        description="CPU seconds its processes had used when its time limit stopped it (None: not measured); "
        "far below the wall time, it says the machine was loaded.",
    )

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.exceeded is None


class Sandbox(Protocol):
    """Runs commands and file operations inside one boundary.

    Paths given to `exec(cwd=…)`, `read_file` and `write_file` are paths *inside*
    the sandbox (e.g. `/app/model.py`); the sandbox maps them to the host and
    checks them against the boundary first. A refused path raises
    `ground.boundary.BoundaryViolation` and is written to the audit log.
    """

    def exec(
        self,
        command: list[str] | str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run `command` (argv list, or a string run by `bash -c`)."""
        ...

    def read_file(self, path: str) -> bytes:
        """Read a file inside the sandbox."""
        ...

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file inside the sandbox (only under a writable root)."""
        ...

    def close(self) -> None:
        """Release everything the sandbox holds (processes, containers, temp dirs)."""
        ...

    def lost_roots(self) -> list[str]:
        """Why each writable root the sandbox put on a capped filesystem is no longer there (unmounted
        under it by twin's own machinery: what ran since wrote where twin does not read); [] if none."""
        ...
