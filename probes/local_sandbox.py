"""A plain-subprocess sandbox for `sandbox_kind="none"` (tests, quick local runs).

It implements `harness.sandbox.base.Sandbox` without isolation: paths inside are
host paths, the network is not cut and nothing is hidden physically. The probe
driver still refuses imports of forbidden packages on the candidate side with an
import hook, so independence is observable; real runs use the bwrap sandbox, where
those packages are physically absent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from harness.sandbox.base import ExecResult

PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
OUTPUT_LIMIT = 200_000


def _clip(text: str, limit: int = OUTPUT_LIMIT) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return text[:half] + "\n…[truncated]…\n" + text[-half:], True


class LocalSandbox:
    """Runs commands as plain subprocesses in their own process group."""

    def __init__(self, *, env: dict[str, str] | None = None, timeout_s: float = 600.0) -> None:
        self.env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        self.env.update(env or {})
        self.timeout_s = timeout_s

    def exec(
        self,
        command: list[str] | str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        argv = ["bash", "-lc", command] if isinstance(command, str) else list(command)
        full_env = {**self.env, **(env or {})}
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        timed_out = False
        try:
            out, err = proc.communicate(stdin, timeout=timeout_s or self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        out, cut_out = _clip(out or "")
        err, cut_err = _clip(err or "")
        return ExecResult(
            returncode=124 if timed_out else proc.returncode,
            stdout=out,
            stderr=err,
            timed_out=timed_out,
            truncated=cut_out or cut_err,
            duration_s=time.perf_counter() - start,
        )

    def read_file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_file(self, path: str, data: bytes | str) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def close(self) -> None:
        """Nothing is held between commands."""
