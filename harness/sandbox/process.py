"""Running one process under limits: wall time, memory, processes, output size.

Shared by every sandbox that starts a local process (`bwrap`, `none`). The
command runs in its own process group; on time-out the whole group is killed,
and anything the command left running in it is killed when it returns. Output
is drained completely (so the command never blocks on a full pipe) but only the
first and last halves of `Limits.output_bytes` are kept.

Per-process limits (address space, core files, and processes inside a user
namespace) are set by `prlimit` in front of the command (`limit_prefix`), which
keeps process creation on the fast path (no Python code between fork and exec).
Where the host allows it, a cgroup-v1 `pids` group caps the number of processes
as well: RLIMIT_NPROC does not bind processes whose real user is root.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from harness.ground.boundary import Limits
from harness.ground.sandbox import ExecResult, SandboxError
from harness.sandbox.quota import is_capped
from harness.sandbox.quota import usage as quota_usage

TIMEOUT_RETURNCODE = 124
DISK_RETURNCODE = 125
DISK_POLL_S = 0.05
_DISK_MAX_ENTRIES = 200_000
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
_STALE_CGROUP_S = 300.0


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
    """A cgroup-v1 `pids` group capping the number of processes of one command."""

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
        _sweep_stale(parent)
        return cls(path)

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

    def remove(self) -> None:
        """Kill what is left and remove the group (the kernel frees it a few ms after exit)."""
        for attempt in range(300):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                self.kill_all()
                time.sleep(0.002 if attempt < 50 else 0.02)


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


class DiskWatch:
    """Watches the writable roots of one command against a disk cap.

    A root on a capped filesystem (`quota.py`, twin as root) cannot go over: its kernel
    refuses the write. There the watch reads the filesystem's own count (`statvfs`: files
    unlinked while open included) and stops the command once it is full, so that it fails
    saying why instead of running on against `ENOSPC`. Any other root is walked: usage
    counts allocated blocks, so a sparse file costs what it really takes, and a tree of
    more than `_DISK_MAX_ENTRIES` entries counts as over the cap too (inodes are disk as
    well); what a walk cannot see (a file unlinked while open) and what a burst writes
    between two looks pass it. Polled while the command runs (the command is killed
    once a root is over) and once more when it ends. A root that was already over (or
    full) before the command (`budgeted` measured it) only counts as over when it grows:
    a command that removes files must be able to run to its end.
    """

    def __init__(self, roots: list[Path], cap_mb: int, labels: list[str] | None = None) -> None:
        self.roots = roots
        self.labels = labels or ["a writable root"] * len(roots)
        self.cap = cap_mb * 1024 * 1024
        self.cap_mb = cap_mb
        self._before: dict[Path, tuple[int, int, int, bool]] = {}

    @classmethod
    def of(cls, mounts: list, cap_mb: int) -> DiskWatch:
        """The watch over a boundary's writable mounts (host paths, labelled by their paths inside)."""
        writable = [m for m in mounts if m.writable]
        return cls([m.host for m in writable], cap_mb, [m.inside for m in writable])

    def _measure(self, root: Path) -> tuple[int, int, int, bool]:
        """(bytes used, entries, bytes left under the cap, at or over the cap) of one root."""
        if is_capped(root):  # the filesystem's count; its size may be larger than this cap
            used, entries, left, full = quota_usage(root)
            return used, entries, min(left, max(0, self.cap - used)), full or used >= self.cap
        used, entries = _usage(root)
        return used, entries, max(0, self.cap - used), used >= self.cap

    def budgeted(self, limits: Limits) -> Limits:
        """`limits` with the per-file cap lowered to what the fullest root has left under its cap.

        Measures the roots before the command. A command can still write several files
        at once, which the watch stops; once a root is over its cap, the next command can
        write no byte into any file until files are removed (removing still works).
        """
        self._before = {root: self._measure(root) for root in self.roots}
        room = [0 if full else left for _used, _entries, left, full in self._before.values()]
        left = -(-min(room, default=self.cap) // (1 << 20))  # rounded up: a file can still reach the cap
        ceiling = limits.disk_mb if limits.file_mb is None else limits.file_mb
        return limits.model_copy(update={"file_mb": min(left, ceiling)})

    def over(self) -> str | None:
        """Why a root is over its cap (naming the root as seen inside), or None."""
        for root, label in zip(self.roots, self.labels, strict=True):
            used, entries, _left, full = self._measure(root)
            used_before, entries_before, _, full_before = self._before.get(root, (0, 0, 0, False))
            if entries > max(_DISK_MAX_ENTRIES, entries_before):
                return f"disk: {label} holds more than {_DISK_MAX_ENTRIES} entries"
            if full and (not full_before or used > used_before):
                # at the cap, writes were refused: no file may reach it
                mib = used // (1024 * 1024)
                return f"disk: {label} holds {mib} MiB, reaching its cap of {self.cap_mb} MiB"
        return None


def _usage(root: Path) -> tuple[int, int]:
    """Allocated bytes and entry count under `root` (iterative, no links followed, one device)."""
    try:
        dev = os.lstat(root).st_dev
    except OSError:
        return 0, 0
    stack, used, entries = [os.fspath(root)], 0, 0
    while stack and entries <= _DISK_MAX_ENTRIES:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False) and st.st_dev == dev:
                        stack.append(entry.path)
        except OSError:
            continue
    return used, entries


def limit_prefix(limits: Limits, *, prlimit: str | None, nproc: bool) -> list[str]:
    """`prlimit` arguments setting the per-process limits in front of a command.

    Args:
        prlimit: path of the prlimit program where the command runs (None: not available).
        nproc: also cap processes (only meaningful inside a fresh user namespace).
    """
    if prlimit is None:
        return []
    memory = limits.memory_mb * 1024 * 1024
    args = [prlimit, f"--as={memory}", "--core=0", f"--fsize={limits.file_bytes()}"]
    if nproc:
        args.append(f"--nproc={limits.max_procs}")
    return [*args, "--"]


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
    pass_fds: tuple[int, ...] = (),
    disk: DiskWatch | None = None,
) -> ExecResult:
    """Run argv with the limits; the result carries exit status, kept output and timing.

    Args:
        rlimits_in_argv: argv already starts with `limit_prefix` (else they are set here).
        pass_fds: file descriptors the command inherits (the seccomp filter).
        disk: writable roots to hold under their cap; going over kills the command and
            makes it fail with `DISK_RETURNCODE` and `exceeded` saying why.

    Raises:
        SandboxError: the program could not be started at all.
    """
    program = argv[0] if "/" not in argv[0] else os.path.join(cwd or ".", argv[0])
    if shutil.which(program, path=env.get("PATH", SYSTEM_PATH)) is None:
        raise SandboxError(f"could not start {argv[0]}: no such program")
    cgroup = PidsCgroup.create(limits.max_procs)
    preexec = None if rlimits_in_argv else _rlimits_setter(limits)
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
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            process_group=0,
            preexec_fn=preexec,
            pass_fds=pass_fds,
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
    if stdin is not None:
        readers.append(threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True))
    for reader in readers:
        reader.start()
    expired = threading.Event()

    def on_timeout() -> None:
        expired.set()
        _kill_group(proc)
        if cgroup is not None:
            cgroup.kill_all()

    # A timer rather than wait(timeout=…): the latter polls, adding up to 50 ms per command.
    timer = threading.Timer(limits.wall_s, on_timeout)
    timer.daemon = True
    timer.start()
    over: list[str] = []
    finished = threading.Event()
    if disk is not None:

        def watch_disk() -> None:
            while not finished.wait(DISK_POLL_S):
                reason = disk.over()
                if reason is not None:
                    over.append(reason)
                    _kill_group(proc)
                    if cgroup is not None:
                        cgroup.kill_all()
                    return

        threading.Thread(target=watch_disk, daemon=True).start()
    try:
        proc.wait()
    finally:
        finished.set()
        timer.cancel()
        _kill_group(proc)  # whatever the command left running in its group goes with it
        if cgroup is not None:
            cgroup.kill_all()
    for reader in readers:
        reader.join(timeout=10)
    if cgroup is not None:
        # The kernel releases an emptied group a few ms later; do not make the caller wait.
        threading.Thread(target=cgroup.remove, daemon=True).start()
    returncode = TIMEOUT_RETURNCODE if expired.is_set() else proc.returncode
    exceeded = over[0] if over else (disk.over() if disk is not None else None)
    exceeded = exceeded or file_cap_reached(returncode, limits)
    stderr = err.text()
    if exceeded is not None:
        returncode = DISK_RETURNCODE
        stderr += f"\ntwin: the command was stopped: {exceeded}\n"
    return ExecResult(
        returncode=returncode,
        stdout=out.text(),
        stderr=stderr,
        timed_out=expired.is_set(),
        truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - start,
        exceeded=exceeded,
    )


def file_cap_reached(returncode: int, limits: Limits) -> str | None:
    """Why a command that died of SIGXFSZ stopped (the per-file cap), else None."""
    if returncode not in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return None
    why = f"disk: a file reached the size cap of {limits.file_bytes() >> 20} MiB"
    if limits.file_mb is not None and limits.file_mb < limits.disk_mb:
        why += f" (what was left under the writable roots' cap of {limits.disk_mb} MiB: remove files first)"
    return why


def _rlimits_setter(limits: Limits):
    memory = limits.memory_mb * 1024 * 1024
    fsize = limits.file_bytes()

    def set_limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return set_limits


def _drain(stream, keep: HeadTail) -> None:
    while chunk := stream.read1(65536):
        keep.feed(chunk)
    stream.close()


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
