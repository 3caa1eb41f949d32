"""The `none` sandbox: a plain subprocess on the host. Nothing is isolated.

Only used when the user asks for it by name (`--sandbox none`). Every command it
runs logs a warning saying so. File operations still go through the boundary's
checks (hidden roots are refused, only the writable root is writable), but a
command can read and write anything the user can, reach the network, and import
every installed package, hidden ones included.
"""

from __future__ import annotations

import logging

from harness.ground.boundary import Boundary
from harness.ground.sandbox import ExecResult, SandboxError
from harness.sandbox.bwrap import read_checked, sandbox_env, write_checked
from harness.sandbox.process import host_prlimit, limit_prefix, run_limited

log = logging.getLogger(__name__)

WARNING = "sandbox 'none': nothing is isolated (files, network, environment, hidden packages)"


class UnsandboxedProcess:
    """Runs commands directly on the host, with the boundary's limits and a clean environment.

    Paths inside are translated to the host through the boundary's mounts (so `/app`
    means the candidate directory on the host), for `cwd` and file operations only;
    the command itself sees the host's filesystem.
    """

    def __init__(self, boundary: Boundary) -> None:
        self.boundary = boundary
        self._closed = False

    def exec(
        self,
        command: list[str] | str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run `command` on the host (argv list, or a string run by `bash -c`)."""
        if self._closed:
            raise SandboxError(f"sandbox {self.boundary.name} is closed")
        log.warning("%s: %s", WARNING, self.boundary.name)
        host_cwd, _ = self.boundary.to_host(cwd or self.boundary.workdir)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise SandboxError("empty command")
        limits = self.boundary.limits
        if timeout_s is not None:
            limits = limits.model_copy(update={"wall_s": timeout_s})
        # No user namespace here: RLIMIT_NPROC would count every process of the user.
        wrapper = limit_prefix(limits, prlimit=host_prlimit(), nproc=False)
        return run_limited(
            [*wrapper, *argv],
            env=sandbox_env(self.boundary, env),
            cwd=str(host_cwd),
            limits=limits,
            stdin=stdin,
            rlimits_in_argv=bool(wrapper),
        )

    def read_file(self, path: str) -> bytes:
        """Read a file (checked against the boundary first)."""
        return read_checked(self.boundary, path)

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file (only under the writable root)."""
        write_checked(self.boundary, path, data)

    def close(self) -> None:
        self._closed = True
