"""Running one process under limits: wall time, memory, processes, output size.

Shared by every sandbox that starts a local process (`bwrap`, `none`). The
command runs in its own session (process group); on time-out the whole group is
killed. Output is drained completely (so the command never blocks on a full pipe)
but only the first and last halves of `Limits.output_bytes` are kept.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from harness.boundary import Limits
from harness.sandbox.base import ExecResult, SandboxError

TIMEOUT_RETURNCODE = 124
_PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")


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


def _drain(stream, keep: HeadTail) -> None:
    while chunk := stream.read(65536):
        keep.feed(chunk)
    stream.close()


class PidsCgroup:
    """A cgroup-v1 `pids` group capping the number of processes (where the host allows it).

    RLIMIT_NPROC does not bind processes whose real user is root, so when twin runs as
    root the only cap on a fork bomb is a pids cgroup. Returns None from `create` where
    no writable pids hierarchy exists (the rlimit set inside then applies instead).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_procs: int) -> PidsCgroup | None:
        if not os.access(_PIDS_CGROUP_ROOT, os.W_OK):
            return None
        path = _PIDS_CGROUP_ROOT / "twin" / uuid.uuid4().hex[:12]
        try:
            path.mkdir(parents=True)
            (path / "pids.max").write_text(str(max_procs))
        except OSError:
            return None
        return cls(path)

    def enter(self) -> None:
        """Move the calling process in (called in the child, before exec)."""
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

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

    def remove(self) -> None:
        for attempt in range(200):
            try:
                self.path.rmdir()
                return
            except OSError:
                self.kill_all()
                time.sleep(0.001 if attempt < 50 else 0.01)


def run_limited(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    limits: Limits,
    stdin: str | None = None,
) -> ExecResult:
    """Run argv with the limits; the result carries exit status, kept output and timing.

    Raises:
        SandboxError: the program could not be started at all.
    """
    cgroup = PidsCgroup.create(limits.max_procs)
    memory = limits.memory_mb * 1024 * 1024

    def in_child() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if cgroup is not None:
            cgroup.enter()

    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=in_child,
            close_fds=True,
        )
    except OSError as exc:
        if cgroup is not None:
            cgroup.remove()
        raise SandboxError(f"could not start {argv[0]}: {exc}") from None
    out, err = HeadTail(limits.output_bytes), HeadTail(limits.output_bytes)
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    finally:
        # Whatever the command left running in its group goes with it.
        _kill_group(proc)
        if cgroup is not None:
            cgroup.remove()
    for reader in readers:
        reader.join(timeout=5)
    return ExecResult(
        returncode=TIMEOUT_RETURNCODE if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - start,
    )


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
