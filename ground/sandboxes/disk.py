"""The disk a command may fill: its writable roots watched against their cap, and the per-file cap.

Every sandbox that runs a command over writable roots (`bwrap`, `docker`) measures them
before it (`DiskWatch.budgeted` lowers the per-file cap to what is left), polls them while
it runs (`DiskGuard`: the command is stopped once a root is over) and once more when it ends. A
command stopped for the disk fails with `DISK_RETURNCODE` and says why in `exceeded`;
one killed by the per-file cap (SIGXFSZ) is read the same way (`file_cap_reached`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from ground.boundary import Limits
from ground.sandboxes.quota import is_capped
from ground.sandboxes.quota import usage as quota_usage

DISK_RETURNCODE = 125
DISK_POLL_S = 0.05
_DISK_MAX_ENTRIES = 200_000


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


class DiskGuard:
    """Polls a watch while one command runs, and stops the command once a root is over its cap.

    Args:
        watch: the command's writable roots (None or no roots: nothing to guard).
        stop: kills the command; called at most once, from the guard's thread.
    """

    def __init__(self, watch: DiskWatch | None, stop: Callable[[], None]) -> None:
        self._watch = watch if watch is not None and watch.roots else None
        self._finished = threading.Event()
        self._over: list[str] = []
        if self._watch is not None:
            threading.Thread(target=self._poll, args=(self._watch, stop), daemon=True).start()

    def _poll(self, watch: DiskWatch, stop: Callable[[], None]) -> None:
        while not self._finished.wait(DISK_POLL_S):
            reason = watch.over()
            if reason is not None:
                self._over.append(reason)
                stop()
                return

    def finish(self) -> None:
        """The command ended: stop polling."""
        self._finished.set()

    def exceeded(self) -> str | None:
        """Why the command was stopped, else why a root is over now that it ended, else None."""
        if self._over:
            return self._over[0]
        return self._watch.over() if self._watch is not None else None


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


def file_cap_reached(returncode: int, limits: Limits) -> str | None:
    """Why a command that died of SIGXFSZ stopped (the per-file cap), else None."""
    if returncode not in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return None
    why = f"disk: a file reached the size cap of {limits.file_bytes() >> 20} MiB"
    if limits.file_mb is not None and limits.file_mb < limits.disk_mb:
        why += f" (what was left under the writable roots' cap of {limits.disk_mb} MiB: remove files first)"
    return why

