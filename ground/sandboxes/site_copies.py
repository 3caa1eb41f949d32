"""The pruned copies of site-packages under the cache: held while in use, the stale ones collected.

Each distinct interpreter environment (its directory, its modification time, the packages
hidden) gets a copy of its own (`packages.pruned_site_dir`): hard links to the environment's
files where they can be made (a directory tree: what it holds of its own is its directories),
else a few GiB for a machine-learning venv; every `pip install` makes a new one. A process that uses a
copy holds a shared `flock` on `<key>.lock` beside it until it exits (the lock file's
modification time is the copy's last use); one that builds a copy holds `<key>.build`
exclusively meanwhile, so a second waits for the copy rather than making its own. Each
time a new copy is built, `collect` removes the least recently used copies that no process
holds, beyond the newest `$TWIN_SITE_CACHE_KEEP` (default 3) and beyond
`$TWIN_SITE_CACHE_MAX_GB` (default 16) in all. The copy just built and every copy in use
stay, whatever the limits say.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ground.errors import TwinError
from ground.untrusted_io import write_atomic

KEEP_ENV, MAX_GB_ENV = "TWIN_SITE_CACHE_KEEP", "TWIN_SITE_CACHE_MAX_GB"
DEFAULT_KEEP, DEFAULT_MAX_GB = 3, 16.0
ORPHAN_AGE_S = 6 * 3600
"""A build's staging directory (`.<key>-…`) older than this was left by a killed build."""
_HELD: dict[str, int] = {}  # lock file -> the descriptor this process holds it by
_HELD_LOCK = threading.Lock()


class SiteCacheConfigError(TwinError):
    """`$TWIN_SITE_CACHE_KEEP` or `$TWIN_SITE_CACHE_MAX_GB` is not a number twin can use."""


def policy() -> tuple[int, int]:
    """(copies kept, bytes kept) from the environment.

    Raises:
        SiteCacheConfigError: a setting is not a number, or below its minimum (1 copy, 0 GB).
    """
    try:
        keep = int(os.environ.get(KEEP_ENV) or DEFAULT_KEEP)
        max_gb = float(os.environ.get(MAX_GB_ENV) or DEFAULT_MAX_GB)
    except ValueError:
        raise SiteCacheConfigError(f"${KEEP_ENV} must be a whole number and ${MAX_GB_ENV} a number") from None
    if keep < 1 or not max_gb >= 0:
        raise SiteCacheConfigError(f"${KEEP_ENV} must be at least 1 and ${MAX_GB_ENV} at least 0")
    return keep, int(max_gb * (1 << 30))


def hold(root: Path, key: str) -> None:
    """Mark the copy `key` under `root` in use by this process until it exits, and used now.

    Call it before looking for the copy: a copy `collect` removed meanwhile is then
    seen to be gone (and built again), never used half-removed. In a cache this user
    cannot write (one made for it beforehand) the copy is used unheld: only that cache's
    owner collects there.
    """
    try:
        _hold(root / f"{key}.lock")
    except OSError:  # not this user's to write (EACCES, EROFS)
        pass


def _hold(path: Path) -> None:
    with _HELD_LOCK:
        if str(path) not in _HELD:
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                fcntl.flock(fd, fcntl.LOCK_SH)
                try:
                    current = os.fstat(fd).st_ino == os.stat(path).st_ino
                except FileNotFoundError:
                    current = False
                if current:
                    break
                os.close(fd)  # collected while this process waited: hold a fresh lock file
            _HELD[str(path)] = fd
    os.utime(path)


@contextmanager
def building(root: Path, key: str) -> Iterator[None]:
    """Build the copy `key` alone: a process (or thread) that wants it too waits here.

    Two sandboxes starting at once on a new machine would otherwise each copy gigabytes
    and throw one copy away; the one that waited looks again and finds the copy built.
    """
    fd = os.open(root / f"{key}.build", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def record_size(root: Path, key: str) -> int:
    """Measure the copy `key` (allocated blocks) and note it beside it; return it."""
    size = _measure(root / key)
    write_atomic(root, f"{key}.size", str(size).encode())
    return size


def collect(root: Path, current: str) -> list[str]:
    """Remove the least recently used copies beyond the policy that no process holds; their keys.

    Also removes what killed builds and removals left (staging older than
    `ORPHAN_AGE_S`, trash) and lock files whose copy is gone.
    """
    keep, max_bytes = policy()
    copies: list[tuple[float, str]] = []
    for entry in os.scandir(root):
        if entry.name.startswith(".trash-") or (entry.name.startswith(".") and _age_s(entry) > ORPHAN_AGE_S):
            shutil.rmtree(entry.path, ignore_errors=True)
        elif not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
            copies.append((_last_use(root, entry.name), entry.name))
        elif entry.name.endswith(".lock") and not (root / entry.name.removesuffix(".lock")).is_dir():
            _remove_unless_held(root, entry.name.removesuffix(".lock"))
    removed, count, total = [], 0, 0
    for _used, key in sorted(copies, reverse=True):
        size = _size(root, key)
        if key == current or (count < keep and total + size <= max_bytes) or not _remove_unless_held(root, key):
            count, total = count + 1, total + size
        else:
            removed.append(key)
    return removed


def _remove_unless_held(root: Path, key: str) -> bool:
    """Remove the copy `key`, its lock and size files, unless a process holds it (then False)."""
    lock = root / f"{key}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return False
    trash = root / f".trash-{key}-{os.getpid()}"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if (root / key).is_dir():
            os.rename(root / key, trash)
        for name in (f"{key}.size", f"{key}.build", f"{key}.lock"):
            (root / name).unlink(missing_ok=True)
    finally:
        os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def _size(root: Path, key: str) -> int:
    try:
        return int((root / f"{key}.size").read_text())
    except (OSError, ValueError):  # a copy from before sizes were noted
        return record_size(root, key)


def _measure(tree: Path) -> int:
    """The blocks a tree holds of its own: a file hard-linked elsewhere too (the environment's own,
    `ground.linked_tree`) is freed only when its last link goes, so it does not count."""
    total = 0
    for folder, dirs, files in os.walk(tree):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if name in dirs or st.st_nlink == 1:
                total += st.st_blocks * 512
    return total


def _last_use(root: Path, key: str) -> float:
    for path in (root / f"{key}.lock", root / key):
        try:
            return os.stat(path).st_mtime
        except OSError:
            continue
    return 0.0


def _age_s(entry: os.DirEntry) -> float:
    try:
        return time.time() - entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0
