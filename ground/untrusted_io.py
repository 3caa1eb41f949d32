"""Reading and writing single files where another uid can write: the one file layer for it.

twin runs as root in CI, and several directories it works in are writable by
someone else: the inbox directory of `--model inbox:DIR` (the outside program's),
the candidate tree and the probe work directories (the sandbox uid's). Whoever
owns such a directory can plant a symbolic link, a FIFO or a huge sparse file at
any name in it, including the names twin is about to use. Every single-file read
or write twin does there goes through this module:

- `read_regular` opens without following a final link and without blocking
  (`O_NOFOLLOW | O_NONBLOCK`), accepts a regular file only (`fstat` after the
  open), reads at most `limit` bytes, and with `deadline_s` gives up when the open
  and the read together take longer (a read pending on a slow or hostile
  filesystem never holds twin past its deadline); `refuse_over=True` refuses a
  file larger than `limit` by its size, before reading any of it;
- `write_atomic` writes a new file under a random temporary name created with
  `O_CREAT | O_EXCL | O_NOFOLLOW` (a link planted at that name is never written
  through), then renames it over the final name (a link planted there is
  replaced, never followed); `write_text_atomic` is the same for a text file at a path;
- `overwrite_regular` rewrites a file of a tree the agent owns in place, never
  through a link and never blocking on a FIFO;
- `Folder` holds a directory open (`O_DIRECTORY | O_NOFOLLOW`) and does all of the
  above, and listing, renaming and existence checks, relative to that descriptor,
  so a path swapped for a link after it was opened is never followed.

`ground.agent_tree` builds the tree-wide operations (walk, copy, remove)
on the same reader.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from pathlib import Path

from ground.errors import TwinError

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 20


class AgentFileError(TwinError):
    """A file in an agent-controlled tree that twin refuses to open (not regular, a link, too big)."""


def kind_of(mode: int) -> str:
    """A word for what a file is, for refusal messages."""
    for test, word in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return word
    return "regular file" if stat.S_ISREG(mode) else "special file"


def read_regular(
    path: Path | str,
    limit: int,
    *,
    dir_fd: int | None = None,
    deadline_s: float | None = None,
    refuse_over: bool = False,
) -> tuple[bytes, int]:
    """Read at most `limit` bytes of a regular file without following a final symlink.

    Args:
        path: the file (relative to `dir_fd` when given).
        limit: bytes read at most.
        dir_fd: a directory descriptor `path` is relative to (see `Folder`).
        deadline_s: seconds the open and the read may take together; None: no deadline.
        refuse_over: refuse a file over `limit` bytes by its size, before reading it.

    Returns:
        (the bytes read, the file's size): a caller compares them to see a cut.

    Raises:
        AgentFileError: the path is a symlink, a directory or a special file, is over
            `limit` with `refuse_over`, cannot be opened, or was not read by the deadline.
    """
    if deadline_s is None:
        return _read(path, limit, dir_fd, refuse_over)
    done: dict[str, object] = {}

    def work() -> None:
        try:
            done["value"] = _read(path, limit, dir_fd, refuse_over)
        except BaseException as exc:  # handed to the waiting thread
            done["error"] = exc

    # A read blocked in the kernel cannot be interrupted; the daemon thread is left to it.
    worker = threading.Thread(target=work, name="twin-untrusted-read", daemon=True)
    worker.start()
    worker.join(max(deadline_s, 0.0))
    if worker.is_alive():
        raise AgentFileError(f"{path}: not read within {deadline_s:g} s")
    if "error" in done:
        raise done["error"]  # type: ignore[misc]
    return done["value"]  # type: ignore[return-value]


def _read(path: Path | str, limit: int, dir_fd: int | None, refuse_over: bool) -> tuple[bytes, int]:
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise AgentFileError(f"{path}: is a symbolic link (not followed)") from None
        raise AgentFileError(f"{path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AgentFileError(f"{path}: is a {kind_of(st.st_mode)}, not a regular file")
        if refuse_over and st.st_size > limit:
            raise AgentFileError(f"{path}: {st.st_size} bytes, over the {limit}-byte cap")
        os.set_blocking(fd, True)
        chunks, left = [], min(limit, st.st_size)
        while left > 0:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st.st_size
    except OSError as exc:
        raise AgentFileError(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_regular_text(
    path: Path | str, limit: int, *, dir_fd: int | None = None, deadline_s: float | None = None
) -> str:
    """`read_regular` decoded as UTF-8 (undecodable bytes replaced); a file over `limit` is refused unread."""
    data, _size = read_regular(path, limit, dir_fd=dir_fd, deadline_s=deadline_s, refuse_over=True)
    return data.decode("utf-8", errors="replace")


def write_atomic(directory: Path | str | int, name: str, data: bytes, *, mode: int = 0o644) -> None:
    """Create `name` in `directory` anew with `data`: a reader sees the old file or the new one, whole.

    The temporary name is random and created exclusively without following a link;
    the rename replaces whatever is at `name` (a planted link included) without
    following it. `directory` is a path or a directory descriptor (see `Folder`).

    Raises:
        OSError: the directory cannot be written.
    """
    if isinstance(directory, int):
        _write_atomic_at(directory, name, data, mode)
        return
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        _write_atomic_at(dir_fd, name, data, mode)
    finally:
        os.close(dir_fd)


def write_text_atomic(path: Path, data: str) -> None:
    """`write_atomic` of UTF-8 text at `path`: the run's and the bench's own records (config, state, grades)."""
    write_atomic(path.parent, path.name, data.encode("utf-8"))


def _write_atomic_at(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    for _ in range(16):
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, _CREATE_FLAGS, mode, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, f"no free temporary name for {name}")
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def overwrite_regular(path: Path | str, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` into `path` in place (created if absent): never through a link, never into a FIFO.

    For files of a tree the agent owns and keeps (the candidate), where a rename
    would change the file's owner and identity.

    Raises:
        OSError: `path` is a link (ELOOP), not a regular file (EINVAL), or cannot be written.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Folder:
    """A directory held open by descriptor; every name is looked up relative to it, links never followed.

    Raises (on construction):
        OSError: the directory is missing, or is itself a symbolic link (ELOOP).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd = -1
        self.fd = os.open(self.path, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def lexists(self, name: str) -> bool:
        """Whether an entry of that name exists (a link counts as itself, never followed)."""
        try:
            os.lstat(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def read(self, name: str, limit: int, *, deadline_s: float | None = None) -> bytes:
        """The whole of the regular file `name`; over `limit` bytes is refused unread (see `read_regular`)."""
        data, _size = read_regular(name, limit, dir_fd=self.fd, deadline_s=deadline_s, refuse_over=True)
        return data

    def write(self, name: str, text: str) -> None:
        write_atomic(self.fd, name, text.encode("utf-8"))
