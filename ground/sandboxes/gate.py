"""Limits set from outside on a bubblewrap sandbox held before its command starts.

bubblewrap's `--info-fd` reports the host pid of the sandbox's first process (the one
that becomes PID 1 of its namespace, whose children run the command). Once every mount
and namespace is in place, that process reads its seccomp filter (`--seccomp`) to the
end before it goes on, and the filter comes through a pipe only twin writes: that read
holds the sandbox. Meanwhile twin sets the per-process limits on it with `prlimit(2)`:
address space, no core files, the largest file and, counted inside the sandbox's fresh
user namespace only, the number of processes; then it writes the filter (in one write,
which a pipe takes whole) and closes the pipe. The command and everything it starts
inherit the limits. No program runs in front of the command to set them, which is most
of what a trivial command used to cost over a bare bubblewrap.

A sandbox let go by anything but the release never runs: if twin dies before it, the
pipe ends empty, and bubblewrap refuses to start without a filter (an empty seccomp
program is invalid); it ends with its error and nothing stays held. bubblewrap's end of
the report pipe is open for reading as well, so that its report never meets a pipe
without a reader (a twin that died): bubblewrap would end on that before letting its
sandbox go on, and the sandbox would wait for it forever. The process is
identified by its pid only after a pidfd holds it and its parent is seen to be the
bubblewrap twin started, and it is seen alive after the limits are set, so a pid
reused in between is never limited in its place. A sandbox that ended on its own in the
window (bubblewrap failed to build it) is bubblewrap's failure, returned as its result.

Setting another process's limits takes its uid or CAP_SYS_RESOURCE. Where twin has
neither (root without that capability, as in a container with Docker's default set),
one small helper per twin process does it (`Limiter`): started as root, it drops to the
sandbox uid at once and then only sets the limits of the pids twin sends it. Nothing in
a sandbox can see it (the sandbox has its own PID namespace); twin ends and reaps it as it
exits (where twin is killed, the helper ends on its input's end), and one that does not
answer in `HELPER_REPLY_S` is replaced.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time

from ground.boundary import Limits
from ground.isolation import SANDBOX_GID, SANDBOX_UID
from ground.sandbox import SandboxError
from ground.sandboxes.owner import parent_pid
from ground.sandboxes.privilege import dropping_root

HELPER_REPLY_S = 10.0
SANDBOX_END_S = 10.0
"""How long a command's end waits for its sandbox's processes to be gone (they were sent SIGKILL)."""
_INFO_CAP = 4096


class NoReport(SandboxError):
    """The sandbox never started: bubblewrap ended first (its own error is on its stderr) or its time ran out."""


class LaunchGate:
    """One command's report and filter pipes: open it, start bubblewrap with `options()`, then `release()`.

    Args:
        seccomp: the compiled filter the sandbox loads (at most `select.PIPE_BUF` bytes).
    """

    def __init__(self, seccomp: bytes) -> None:
        if not 0 < len(seccomp) <= select.PIPE_BUF or len(seccomp) % 8:
            raise SandboxError(f"a seccomp program of {len(seccomp)} bytes cannot be handed over whole")
        self._seccomp = seccomp
        self._info_r, info_w = os.pipe()
        try:  # bubblewrap's end reads too, so its report never meets a closed pipe (a dead twin)
            self._info_w = os.open(f"/proc/self/fd/{self._info_r}", os.O_RDWR | os.O_CLOEXEC)
        finally:
            os.close(info_w)
        self._filter_r, self._filter_w = os.pipe()
        self._holder = -1  # a pidfd on the sandbox's first process, once it reported

    @property
    def fds(self) -> tuple[int, int]:
        """The descriptors bubblewrap inherits."""
        return self._info_w, self._filter_r

    def options(self) -> list[str]:
        """bubblewrap's options naming them."""
        return ["--info-fd", str(self._info_w), "--seccomp", str(self._filter_r)]

    def started(self) -> None:
        """Drop twin's copies of bubblewrap's ends once it runs (else the report never ends)."""
        for fd in (self._info_w, self._filter_r):
            os.close(fd)
        self._info_w = self._filter_r = -1

    def release(self, proc: subprocess.Popen, limits: Limits, *, deadline: float) -> None:
        """Set the limits on the held sandbox and let its command run.

        Args:
            proc: the bubblewrap twin started (its pid is the sandbox process's parent).
            deadline: `time.monotonic()` by which bubblewrap must have reported.

        Raises:
            NoReport: the sandbox never started (see the class); nothing in it ran, and
                bubblewrap is left to end with its own error.
            SandboxError: the limits could not be set on a sandbox that is there: it is
                still held, and the caller kills it.
        """
        child = _child_pid(self._read_info(deadline))
        try:
            holder = os.pidfd_open(child)
        except ProcessLookupError:
            raise NoReport("the sandbox ended before its limits were set") from None
        self._holder = holder  # kept: the sandbox's end is waited for through it (`end`)
        self._limit(holder, child, proc.pid, limits)
        try:
            os.write(self._filter_w, self._seccomp)
        except BrokenPipeError:
            raise NoReport("the sandbox ended before it was let go") from None
        os.close(self._filter_w)
        self._filter_w = -1

    def end(self, *, kill: bool) -> bool:
        """Wait up to `SANDBOX_END_S` until the sandbox's first process has ended, killing it first if `kill`.

        That process is PID 1 of the sandbox's namespace: the kernel ends everything else in
        the namespace before it, so once it has ended nothing the command started runs. Killing
        bubblewrap only makes the kernel send it SIGKILL (`--die-with-parent`); that is not yet
        its end. A sandbox that never reached `release` has nothing to wait for.

        Returns:
            Whether it has ended (False: still running after the wait).
        """
        if self._holder < 0:
            return True
        if kill:
            try:
                signal.pidfd_send_signal(self._holder, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # ended already, or no longer ours to signal: waited for all the same
        return bool(select.select([self._holder], [], [], SANDBOX_END_S)[0])

    def _limit(self, holder: int, child: int, parent: int, limits: Limits) -> None:
        """Limit `child` (held by the pidfd `holder`), whose parent must be `parent`."""
        failure: Exception | None = None
        try:
            if parent_pid(child) != parent:
                raise SandboxError("the sandbox's first process is not bubblewrap's child")
            LIMITER.apply(child, _wanted(limits))
        except (OSError, SandboxError) as exc:
            failure = exc
        if select.select([holder], [], [], 0)[0]:  # it ended: whatever failed, bubblewrap says why
            raise NoReport("the sandbox ended before its limits were set")
        if isinstance(failure, SandboxError):
            raise failure
        if failure is not None:
            raise SandboxError(f"cannot set the sandbox's limits: {failure}") from None

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
        for fd in (self._info_r, self._info_w, self._filter_r, self._filter_w, self._holder):
            if fd >= 0:
                os.close(fd)
        self._info_r = self._info_w = self._filter_r = self._filter_w = self._holder = -1


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
        for _attempt in range(2):  # a helper that died or hangs is replaced, once
            helper = self._started()
            try:
                os.write(helper.stdin.fileno(), request.encode())
                reply = _line(helper.stdout.fileno(), time.monotonic() + HELPER_REPLY_S)
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
                bufsize=0,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},
                cwd="/",
            )
        return self._helper

    def _stop(self) -> None:
        """End the helper and reap it (also at exit: nothing twin started outlives it, `LIMITER`)."""
        if self._helper is not None:
            self._helper.kill()
            self._helper.wait()
            for stream in (self._helper.stdin, self._helper.stdout):
                stream.close()
            self._helper = None

    def helper_pid(self) -> int | None:
        """The helper's pid while it runs (a benchmark counts its CPU time)."""
        return self._helper.pid if self._helper is not None and self._helper.poll() is None else None

    def _forget(self) -> None:
        """In a forked child: the parent's helper and lock are not this process's to use."""
        self._helper = None
        self._lock = threading.Lock()


def _line(fd: int, deadline: float) -> str:
    """One line from `fd` by `deadline` ('' at its end or when time is up)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 4096:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return ""
        chunk = os.read(fd, 4096)
        if not chunk:
            return ""
        data += chunk
    return data.decode(errors="replace").strip()


LIMITER = Limiter()
os.register_at_fork(after_in_child=LIMITER._forget)
atexit.register(LIMITER._stop)  # left to see its input end, it would still be exiting after twin had
