"""Limits set from outside on a bubblewrap sandbox held before its command starts.

bubblewrap's `--info-fd` reports the host pid of the sandbox's first process (the one
that becomes PID 1 of its namespace, whose children run the command), and `--block-fd`
holds that process, once every mount and namespace is in place, until one byte
arrives. In between, twin sets the per-process limits on it with `prlimit(2)`: address
space, no core files, the largest file and, counted inside the sandbox's fresh user
namespace only, the number of processes. The command and everything it starts inherit
them. No program runs in front of the command to set them, which is most of what a
trivial command used to cost over a bare bubblewrap.

Setting another process's limits takes its uid or CAP_SYS_RESOURCE. Where twin has
neither (root without that capability, as in a container with Docker's default set),
one small helper per twin process does it (`Limiter`): started as root, it drops to the
sandbox uid at once and then only sets the limits of the pids twin sends it. Nothing in
a sandbox can see it (the sandbox has its own PID namespace); it ends when twin does.

The process is identified by its pid only after a pidfd holds it, its parent is seen to
be the bubblewrap twin started, and it is seen alive after the limits are set, so a pid
reused in between is never limited in its place. The hold is a descriptor open for
reading and writing: if twin dies before the release, the read never ends (no writer
ever closes), and the sandbox dies with its parent instead of running without limits.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import threading
import time

from ground.boundary import Limits
from ground.isolation import SANDBOX_GID, SANDBOX_UID
from ground.sandbox import SandboxError
from ground.sandboxes.privilege import dropping_root

_INFO_CAP = 4096


class LaunchGate:
    """One command's `--info-fd`/`--block-fd` pair: open it, start bubblewrap with `options()`, then `release()`."""

    def __init__(self) -> None:
        self._info_r, self._info_w = os.pipe()
        block_r, self._block_w = os.pipe()
        try:
            self._block = os.open(f"/proc/self/fd/{block_r}", os.O_RDWR | os.O_CLOEXEC)
        finally:
            os.close(block_r)

    @property
    def fds(self) -> tuple[int, int]:
        """The descriptors bubblewrap inherits."""
        return self._info_w, self._block

    def options(self) -> list[str]:
        """bubblewrap's options naming them."""
        return ["--info-fd", str(self._info_w), "--block-fd", str(self._block)]

    def started(self) -> None:
        """Drop twin's copies of bubblewrap's ends once it runs (else the report never ends)."""
        for fd in (self._info_w, self._block):
            os.close(fd)
        self._info_w = self._block = -1

    def release(self, proc: subprocess.Popen, limits: Limits, *, deadline: float) -> None:
        """Set the limits on the held sandbox and let its command run.

        Args:
            proc: the bubblewrap twin started (its pid is the sandbox process's parent).
            deadline: `time.monotonic()` by which bubblewrap must have reported.

        Raises:
            NoReport: bubblewrap reported no sandbox by the deadline, or ended without one (its
                stderr says why); nothing in it runs.
            SandboxError: the limits could not be set on the sandbox (the caller kills it).
        """
        child = _child_pid(self._read_info(deadline))
        holder = os.pidfd_open(child)
        try:
            if _parent_of(child) != proc.pid:
                raise SandboxError("the sandbox's first process is not bubblewrap's child")
            LIMITER.apply(child, _wanted(limits))
            if select.select([holder], [], [], 0)[0]:
                raise SandboxError("the sandbox ended before its limits were set")
        except OSError as exc:
            raise SandboxError(f"cannot set the sandbox's limits: {exc}") from None
        finally:
            os.close(holder)
        os.write(self._block_w, b"x")

    def _read_info(self, deadline: float) -> bytes:
        """bubblewrap's report, read until it closes it ('' where it failed before writing one)."""
        data = bytearray()
        while len(data) < _INFO_CAP:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._info_r], [], [], left)[0]:
                raise NoReport("bubblewrap did not report its sandbox in time")
            chunk = os.read(self._info_r, _INFO_CAP)
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def close(self) -> None:
        for fd in (self._info_r, self._info_w, self._block, self._block_w):
            if fd >= 0:
                os.close(fd)
        self._info_r = self._info_w = self._block = self._block_w = -1


class NoReport(SandboxError):
    """bubblewrap reported no sandbox: it ended first (its own error is on its stderr) or its time ran out."""


def _child_pid(info: bytes) -> int:
    if not info.strip():
        raise NoReport("bubblewrap could not build the sandbox")
    try:
        pid = json.loads(info)["child-pid"]
    except (ValueError, KeyError, TypeError):
        raise SandboxError("bubblewrap's report on its sandbox is unreadable") from None
    if not isinstance(pid, int) or pid <= 1:
        raise SandboxError("bubblewrap's report on its sandbox is unreadable")
    return pid


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read(4096).rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]) if len(fields) > 1 else None


_KINDS = (resource.RLIMIT_AS, resource.RLIMIT_CORE, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC)


def _wanted(limits: Limits) -> tuple[int, ...]:
    """The values for `_KINDS`, each no higher than twin's own hard limit (which the sandbox inherited)."""
    wanted = (limits.memory_mb * 1024 * 1024, 0, limits.file_bytes(), limits.max_procs)
    values = []
    for kind, value in zip(_KINDS, wanted, strict=True):
        hard = resource.getrlimit(kind)[1]
        values.append(value if hard == resource.RLIM_INFINITY else min(value, hard))
    return tuple(values)


# Run as root with -I -S: drops to the sandbox uid, then sets "pid value..." per line, answering each.
_HELPER = """
import os, resource, sys
os.setgroups([]); os.setresgid({gid}, {gid}, {gid}); os.setresuid({uid}, {uid}, {uid})
kinds = {kinds}
for line in sys.stdin:
    try:
        pid, *values = map(int, line.split())
        for kind, value in zip(kinds, values):
            resource.prlimit(pid, kind, (value, value))
        reply = "ok"
    except (OSError, ValueError) as exc:
        reply = str(exc) or type(exc).__name__
    sys.stdout.write(reply.replace(chr(10), " ") + chr(10))
    sys.stdout.flush()
"""


class Limiter:
    """Sets the `_KINDS` limits of another process: directly where twin may, else through its helper."""

    def __init__(self) -> None:
        self._direct = True
        self._helper: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def apply(self, pid: int, values: tuple[int, ...]) -> None:
        """Raises OSError (or SandboxError from the helper) where the limits could not be set."""
        if self._direct:
            try:
                for kind, value in zip(_KINDS, values, strict=True):
                    resource.prlimit(pid, kind, (value, value))
                return
            except PermissionError:
                if not dropping_root():
                    raise
                self._direct = False
        with self._lock:
            reply = self._ask(f"{pid} {' '.join(map(str, values))}\n")
        if reply != "ok":
            raise SandboxError(f"cannot set the sandbox's limits: {reply}")

    def _ask(self, request: str) -> str:
        for _attempt in range(2):  # a helper that died is started again, once
            helper = self._started()
            try:
                helper.stdin.write(request.encode())
                helper.stdin.flush()
                reply = helper.stdout.readline(4096).decode(errors="replace").strip()
            except OSError:
                reply = ""
            if reply:
                return reply
            self._stop()
        raise SandboxError("the helper that sets sandbox limits does not answer")

    def _started(self) -> subprocess.Popen:
        if self._helper is None or self._helper.poll() is not None:
            code = _HELPER.format(uid=SANDBOX_UID, gid=SANDBOX_GID, kinds=_KINDS)
            self._helper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},
                cwd="/",
            )
        return self._helper

    def _stop(self) -> None:
        if self._helper is not None:
            self._helper.kill()
            self._helper.wait()
            for stream in (self._helper.stdin, self._helper.stdout):
                stream.close()
            self._helper = None

    def helper_pid(self) -> int | None:
        """The helper's pid while it runs (a benchmark counts its CPU time)."""
        return self._helper.pid if self._helper is not None and self._helper.poll() is None else None


LIMITER = Limiter()
