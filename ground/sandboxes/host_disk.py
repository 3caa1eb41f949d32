"""The host's own disk under twin: room left, space allocated up front, writes checked as written.

A capped root (`quota.py`) is an ext4 image on the host, reached through a loop device.
Were the image sparse, a host that fills up would take the capped filesystem's writes
into the page cache and lose them at writeback: files read back as NULs later. So the
image is allocated whole before it is used (`allocate`), and before a capped tree is
copied out or committed its filesystem is flushed and asked for write errors
(`sync_filesystem`).
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from ground.sandbox import SandboxError

HOST_MIN_FREE_BYTES = 64 << 20
HOST_MIN_FREE_INODES = 1024


class HostDiskFull(SandboxError):
    """The host has no room for what twin must write (a capped root's image): not the agent's doing."""


def allocate(path: Path, size: int, *, what: str) -> None:
    """Create the file `path` with `size` bytes allocated on the host disk (never sparse).

    Args:
        what: what the file is for, in words (said when there is no room).

    Raises:
        HostDiskFull: the host filesystem has no room for `size` bytes (nothing is left behind).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        free = _free_bytes(path.parent)
        raise HostDiskFull(
            f"no room on the host for {what}: {size >> 20} MiB needed in {path.parent}, "
            f"{free >> 20} MiB free; free space there (or lower the disk cap), then try again"
        ) from None
    os.close(fd)


def allocated_bytes(path: Path) -> int:
    """How much of `path` the host disk really holds (a sparse file holds less than its size)."""
    return os.stat(path).st_blocks * 512


def sync_filesystem(path: Path | str | int) -> None:
    """Write out the filesystem holding `path` (a path or an open descriptor), raising its write errors.

    `syncfs(2)` reports an error that writeback met since the descriptor was opened (and
    one nobody has seen yet): a descriptor held since a filesystem was mounted sees all.

    Raises:
        OSError: the filesystem could not write what it was given (e.g. EIO, ENOSPC).
    """
    fd = path if isinstance(path, int) else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc().syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), None if isinstance(path, int) else str(path))
    finally:
        if not isinstance(path, int):
            os.close(fd)


def host_shortage(paths: list[Path]) -> str | None:
    """Which of the host filesystems holding `paths` an unprivileged writer has run out of, in words.

    Space or inodes below `HOST_MIN_FREE_*` for a non-root user (`f_bavail`, `f_favail`:
    the sandbox uid is one). Pass twin's own host directories (stage, temporary, cache),
    never a capped root: a sandbox can fill its own filesystem, not the host's.

    Returns:
        e.g. "/tmp has 0 MiB free for unprivileged writers", or None when every one has room.
    """
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        free = st.f_bavail * st.f_frsize
        if free < HOST_MIN_FREE_BYTES:
            return f"{path} has {free >> 20} MiB free for unprivileged writers"
        if st.f_files and st.f_favail < HOST_MIN_FREE_INODES:
            return f"{path} has {st.f_favail} inodes free for unprivileged writers"
    return None


def _free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC
