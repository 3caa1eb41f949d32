"""The `none` sandbox: a plain subprocess on the host. Nothing is isolated.

Only used when the user asks for it by name (`--sandbox none`). Every command it
runs logs a warning saying so. File operations still go through the boundary's
checks (hidden roots are refused, only the writable root is writable), but a
command can read and write anything the user can, reach the network, and import
every installed package, hidden ones included.
"""

from __future__ import annotations

import logging

from ground.sandbox import ExecResult, SandboxError
from ground.sandboxes.base import BoundarySandbox, sandbox_env
from ground.sandboxes.process import host_prlimit, limit_prefix, run_limited

log = logging.getLogger(__name__)

WARNING = "sandbox 'none': nothing is isolated (files, network, environment, hidden packages)"


class UnsandboxedProcess(BoundarySandbox):
    """Runs commands directly on the host, with the boundary's limits and a clean environment.

    Paths inside are translated to the host through the boundary's mounts (so `/app`
    means the candidate directory on the host), for `cwd` and file operations only;
    the command itself sees the host's filesystem.
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
        """Run `command` on the host (argv list, or a string run by `bash -c`)."""
        self._refuse_if_closed()
        log.warning("%s: %s", WARNING, self.boundary.name)
        host_cwd, _ = self.boundary.to_host(cwd or self.boundary.workdir)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise SandboxError("empty command")
        limits = self.boundary.limits
        if timeout_s is not None:
            limits = limits.model_copy(update={"wall_s": timeout_s})
        # No user namespace here: RLIMIT_NPROC would count every process of the user.
        wrapper = limit_prefix(limits, prlimit=host_prlimit())
        return run_limited(
            [*wrapper, *argv],
            env=sandbox_env(self.boundary, env),
            cwd=str(host_cwd),
            limits=limits,
            stdin=stdin,
            rlimits_in_argv=bool(wrapper),
        )
