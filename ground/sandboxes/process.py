"""Running one process under limits: wall time, memory, processes, output size.

Shared by every sandbox that starts a local process (`bwrap`, `none`). The
command runs in its own process group; on time-out the whole group is killed,
and anything the command left running in it is killed when it returns. Output
is drained completely (so the command never blocks on a full pipe) but only the
first and last halves of `Limits.output_bytes` are kept. A command over writable
roots is held to their disk cap by `disk.py`'s watch.

Per-process limits (address space, core files, file size) are set on a bubblewrap
sandbox from outside, while bubblewrap holds it (`gate.py`), where its user
namespace also makes RLIMIT_NPROC count its processes only. Any other command gets
them from `prlimit` in front of it (`limit_prefix`), which keeps process creation
on the fast path (no Python code between fork and exec), and, where the host allows
it, a cgroup-v1 `pids` group caps its processes: RLIMIT_NPROC counts every process
of the user there, and does not bind root at all.
"""

from __future__ import annotations

import atexit
import math
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from ground.boundary import Limits
from ground.sandbox import ExecResult, SandboxError
from ground.sandboxes.disk import DISK_RETURNCODE, DiskWatch, file_cap_reached
from ground.sandboxes.gate import SANDBOX_END_S, LaunchGate, NoReport
from ground.sandboxes.owner import tree_cpu_s
from ground.sandboxes.supervise import supervise

TIMEOUT_RETURNCODE = 124
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
_STALE_CGROUP_S = 300.0
_SWEEP_EVERY_S = 60.0


class HeadTail:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {dropped} bytes of output dropped ...]\n"
        return self.head.decode("utf-8", "replace") + marker + self.tail.decode("utf-8", "replace")


class PidsCgroup:
    """A cgroup-v1 `pids` group capping the number of processes of one command.

    The kernel frees an emptied group only a while (up to seconds) after its last
    process ends: `discard()` removes it if it can at once, else leaves it to the next
    `create()` or to the process's exit, so that no command waits for that, and no
    thread is started per command to do it. Groups a killed harness left behind are
    swept now and then (`_SWEEP_EVERY_S`), not on every command.
    """

    _pending: list[PidsCgroup] = []
    _lock = threading.Lock()
    _swept_at = -math.inf

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_procs: int) -> PidsCgroup | None:
        """A fresh group, or None where no writable pids hierarchy exists."""
        if not pids_cgroup_available():
            return None
        parent = _PIDS_CGROUP_ROOT / "twin"
        path = parent / uuid.uuid4().hex[:12]
        try:
            path.mkdir(parents=True)
            (path / "pids.max").write_text(str(max_procs))
        except OSError:
            return None
        cls._tidy(parent)
        return cls(path)

    @classmethod
    def _tidy(cls, parent: Path) -> None:
        """Remove the groups discarded earlier that the kernel has freed since; now and then, stale ones."""
        with cls._lock:
            # oldest first, and only until one is not freed yet: the younger ones will not be either
            while cls._pending and cls._pending[0]._try_remove():
                cls._pending.pop(0)
            sweep = time.monotonic() - cls._swept_at > _SWEEP_EVERY_S
            if sweep:
                cls._swept_at = time.monotonic()
        if sweep:
            _sweep_stale(parent)

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def kill_all(self) -> None:
        try:
            pids = (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError, PermissionError):
                pass

    def _try_remove(self) -> bool:
        """Remove the group if the kernel lets it go now (True: gone); else kill what is still in it."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            self.kill_all()
            return False
        return True

    def discard(self) -> None:
        """Leave the group (its command ended, what it left killed) to be removed by a later `create()` or at exit.

        The kernel never frees a group the moment its last process ends: trying at once would
        only fail.
        """
        with self._lock:
            self._pending.append(self)

    def remove(self) -> None:
        """Kill what is left and remove the group, waiting for the kernel to free it."""
        for attempt in range(300):
            if self._try_remove():
                return
            time.sleep(0.002 if attempt < 50 else 0.02)

    @classmethod
    def remove_pending(cls) -> None:
        """Remove every group still waiting to be removed (at exit)."""
        with cls._lock:
            pending, cls._pending[:] = list(cls._pending), []
        for group in pending:
            group.remove()


atexit.register(PidsCgroup.remove_pending)


def _sweep_stale(parent: Path) -> None:
    """Remove groups that a killed harness left behind (empty ones only; rmdir refuses others)."""
    now = time.time()
    try:
        children = list(parent.iterdir())
    except OSError:
        return
    for child in children:
        try:
            if child.is_dir() and now - child.stat().st_mtime > _STALE_CGROUP_S:
                child.rmdir()
        except OSError:
            pass

def limit_prefix(limits: Limits, *, prlimit: str | None) -> list[str]:
    """`prlimit` arguments setting the per-process limits in front of a command (not processes: see above).

    Args:
        prlimit: path of the prlimit program (None: not available).
    """
    if prlimit is None:
        return []
    memory = limits.memory_mb * 1024 * 1024
    return [prlimit, f"--as={memory}", "--core=0", f"--fsize={limits.file_bytes()}", "--"]


def pids_cgroup_available() -> bool:
    """Whether commands can be put in a pids cgroup here (then it, not RLIMIT_NPROC, caps them)."""
    return os.access(_PIDS_CGROUP_ROOT, os.W_OK)


def host_prlimit() -> str | None:
    return shutil.which("prlimit", path=SYSTEM_PATH)


def run_limited(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    limits: Limits,
    stdin: str | None = None,
    rlimits_in_argv: bool = False,
    disk: DiskWatch | None = None,
    gate: LaunchGate | None = None,
) -> ExecResult:
    """Run argv with the limits; the result carries exit status, kept output and timing.

    Args:
        rlimits_in_argv: argv already starts with `limit_prefix` (else they are set here).
        disk: writable roots to hold under their cap; going over kills the command and
            makes it fail with `DISK_RETURNCODE` and `exceeded` saying why.
        gate: argv is a bubblewrap holding its sandbox at the gate's descriptors: the gate
            sets the limits on the sandbox (its user namespace makes RLIMIT_NPROC count only
            the sandbox, its PID namespace ends everything in it), so no cgroup or limits
            program is used.

    Raises:
        SandboxError: the program could not be started at all, or its sandbox's limits could not be set.
    """
    program = argv[0] if "/" not in argv[0] else os.path.join(cwd or ".", argv[0])
    if shutil.which(program, path=env.get("PATH", SYSTEM_PATH)) is None:
        raise SandboxError(f"could not start {argv[0]}: no such program")
    cgroup = PidsCgroup.create(limits.max_procs) if gate is None else None
    preexec = None if rlimits_in_argv or gate is not None else _rlimits_setter(limits)
    if cgroup is not None:
        # One small shell joins the group and sets the rlimits, then becomes the command
        # (ulimit -v counts KiB, -f counts 512-byte blocks, as POSIX sh does).
        kib, blocks = limits.memory_mb * 1024, limits.file_bytes() // 512
        join = (
            f'echo $$ > "$0" && ulimit -v {kib} && ulimit -c 0 && ulimit -f {blocks} && exec "$@"'
        )
        limited = argv
        argv = ["/bin/sh", "-c", join, cgroup.procs_file, *limited]
        preexec = None
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            bufsize=0,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            process_group=0,
            preexec_fn=preexec,
            pass_fds=gate.fds if gate is not None else (),
        )
    except OSError as exc:
        if cgroup is not None:
            cgroup.discard()
        raise SandboxError(f"could not start {argv[0]}: {exc}") from None
    if gate is not None:
        _open_gate(gate, proc, limits, deadline=start + limits.wall_s)
    out, err = HeadTail(limits.output_bytes), HeadTail(limits.output_bytes)

    cpu: list[float] = []

    def stop() -> None:
        if not cpu and time.monotonic() >= start + limits.wall_s:  # its time limit: how much CPU it had
            cpu.append(tree_cpu_s(proc.pid) or 0.0)
        _kill_group(proc)
        if cgroup is not None:
            cgroup.kill_all()

    try:
        watched = supervise(
            proc,
            out,
            err,
            stdin=None if stdin is None else stdin.encode(),
            wall_s=max(limits.wall_s - (time.monotonic() - start), 0.0),
            disk=disk,
            stop=stop,
        )
    finally:
        if cgroup is not None:
            cgroup.discard()
        ended = gate is None or gate.end(kill=True)  # bubblewrap gone is not yet its sandbox gone
    if not ended:
        raise SandboxError(f"the sandbox's processes did not end within {SANDBOX_END_S:g} s of SIGKILL")
    returncode = TIMEOUT_RETURNCODE if watched.timed_out else proc.returncode
    result = command_result(
        returncode, out, err, timed_out=watched.timed_out, started=start, exceeded=watched.exceeded, limits=limits
    )
    if watched.timed_out and cpu:
        result.cpu_s = cpu[0]
    return result


def _open_gate(gate: LaunchGate, proc: subprocess.Popen, limits: Limits, *, deadline: float) -> None:
    """Set the limits on the sandbox `proc` holds and let it go; one that cannot be limited never runs.

    A sandbox that never started is left to bubblewrap, so that its own error comes back as
    the command's; one still being built at the deadline has timed out (it stays held until
    `supervise` stops it). On any other failure, or an interruption, bubblewrap and its held
    sandbox are killed before the error goes on.
    """
    gate.started()
    try:
        gate.release(proc, limits, deadline=deadline)
    except NoReport:
        pass
    except BaseException:
        _kill_group(proc)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
        gate.end(kill=True)
        raise


def command_result(
    returncode: int,
    out: HeadTail,
    err: HeadTail,
    *,
    timed_out: bool,
    started: float,
    exceeded: str | None,
    limits: Limits,
) -> ExecResult:
    """The result of a command that ended; one the disk stopped fails with `DISK_RETURNCODE`, saying why.

    Args:
        started: `time.monotonic()` when the command started.
        exceeded: why its disk watch stopped it (None: it did not); a death by SIGXFSZ
            is read as the per-file cap.
    """
    exceeded = exceeded or file_cap_reached(returncode, limits)
    stderr = err.text()
    if exceeded is not None:
        returncode = DISK_RETURNCODE
        stderr += f"\ntwin: the command was stopped: {exceeded}\n"
    return ExecResult(
        returncode=returncode,
        stdout=out.text(),
        stderr=stderr,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - started,
        limit_s=limits.wall_s,
        exceeded=exceeded,
    )


def _rlimits_setter(limits: Limits):
    memory = limits.memory_mb * 1024 * 1024
    fsize = limits.file_bytes()

    def set_limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return set_limits


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
