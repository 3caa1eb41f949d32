"""Watching one running command from the calling thread: its output, its input, its wall time, its disk.

One `selectors` loop does what a thread per stream, a timer and a disk-polling thread
used to: starting those threads cost more than a trivial sandboxed command, and on a
busy machine each start waits for the scheduler. The loop reads stdout and stderr as
they come (the command never blocks on a full pipe), feeds stdin without blocking,
stops the command when its wall time is up or a writable root goes over its cap
(looking every `DISK_POLL_S`), and sees the command end through a pidfd (Linux 5.3 and
later; elsewhere by polling every `EXIT_POLL_S`). Once the command has ended, whatever
it left running in its group is stopped, and output still arriving is read for at most
`DRAIN_AFTER_EXIT_S` (a process that escaped the group may hold the pipes open).
"""

from __future__ import annotations

import math
import os
import selectors
import subprocess
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

from ground.sandboxes.disk import DISK_POLL_S, DiskWatch

EXIT_POLL_S = 0.005
DRAIN_AFTER_EXIT_S = 10.0
_CHUNK = 65536


class Sink(Protocol):
    """Where a stream's bytes go (`process.HeadTail`)."""

    def feed(self, chunk: bytes) -> None: ...


class Watched(NamedTuple):
    """How a supervised command ended, beyond its exit status."""

    timed_out: bool
    exceeded: str | None
    """Why its disk watch stopped it, or why a root is over its cap now that it ended (None: neither)."""


def pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process `pid` ends, where the kernel has them."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def supervise(
    proc: subprocess.Popen,
    out: Sink,
    err: Sink,
    *,
    stdin: bytes | None,
    wall_s: float,
    disk: DiskWatch | None,
    stop: Callable[[], None],
) -> Watched:
    """Drive `proc` (started with unbuffered pipes) to its end; `stop` kills it and its group.

    Returns when the command has ended and its output is read (or given up on); the
    process is reaped.
    """
    started = time.monotonic()
    deadline = started + wall_s
    watch = disk if disk is not None and disk.roots else None
    look = started + DISK_POLL_S if watch is not None else math.inf
    selector = selectors.DefaultSelector()
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin or b"")
    feed = proc.stdin.fileno() if stdin is not None else None
    if feed is not None:
        os.set_blocking(feed, False)
        selector.register(feed, selectors.EVENT_WRITE)
    ended = pidfd(proc.pid)
    if ended is not None:
        selector.register(ended, selectors.EVENT_READ)
    exited_at: float | None = None
    timed_out, over = False, None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and ended is None and proc.poll() is not None:
                exited_at = now
                stop()  # whatever the command left running in its group goes with it
            if exited_at is not None:
                if not streams or now - exited_at >= DRAIN_AFTER_EXIT_S:
                    break
            elif now >= deadline and not timed_out:
                timed_out = True
                stop()
            elif now >= look:
                over = watch.over() if watch is not None else None
                look = math.inf if over is not None else now + DISK_POLL_S
                if over is not None:
                    stop()
            for key, _events in selector.select(_wait(now, deadline, look, exited_at, timed_out, ended)):
                fd = key.fd
                if fd == ended:
                    selector.unregister(fd)
                    exited_at = time.monotonic()
                    stop()
                elif fd == feed:
                    pending = _write(fd, pending)
                    if not pending:
                        selector.unregister(fd)
                        proc.stdin.close()
                        feed = None
                else:
                    chunk = os.read(fd, _CHUNK)
                    if chunk:
                        streams[fd].feed(chunk)
                    else:
                        selector.unregister(fd)
                        del streams[fd]
    finally:
        selector.close()
        if ended is not None:
            os.close(ended)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        if exited_at is None:  # an error left the loop: the command must not outlive it
            stop()
        proc.wait()
    if over is None and watch is not None:
        over = watch.over()
    return Watched(timed_out, over)


def _wait(now: float, deadline: float, look: float, exited_at: float | None, timed_out: bool, ended: int | None):
    """How long the loop may sleep before something is due (None: until an event)."""
    if exited_at is not None:
        return max(0.0, exited_at + DRAIN_AFTER_EXIT_S - now)
    due = min(look, math.inf if timed_out else deadline)
    if ended is None:
        due = min(due, now + EXIT_POLL_S)
    return None if due == math.inf else max(0.0, due - now)


def _write(fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes now; an empty view once all is written or the reader is gone."""
    try:
        return pending[os.write(fd, pending[:_CHUNK]) :]
    except BlockingIOError:
        return pending
    except OSError:  # the command closed its stdin or ended: the rest is not wanted
        return pending[:0]
