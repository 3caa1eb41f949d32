"""One content digest of a tree as a sandbox that mounts it will see it.

twin keeps work keyed by what a tree holds: a readable view of a task's folder is reused while
the folder holds the same (`ground.views`), and a task that passed its check is not
checked again while the task holds the same (`benchmark_adapter.grading.check`). A key made of
sizes and modification times can be kept while the content changes (both can be set back), and
a key that skips what the sandbox runs (byte code in `__pycache__`, a linked folder's files) is
no key at all; so both use this digest:

- every entry's path relative to the root, its kind and permission bits;
- every regular file's bytes, whatever its size or name (`__pycache__` included);
- a symbolic link is resolved as the sandbox resolves it on the host's files: its text, and
  in its place what it points to (a file's bytes, a folder's entries); a link to a folder it
  sits in is marked a loop, never followed again; a dangling one is marked so.

Nothing is skipped but the `hidden` paths (those a sandbox never shows).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

MAX_ENTRIES = 200_000
_CHUNK = 1 << 20


def content_digest(root: Path, *, hidden: Sequence[Path] = (), max_entries: int = MAX_ENTRIES) -> str | None:
    """The sha256 (hex) of `root` as described in the module docstring; None where the tree, its
    links followed, has more than `max_entries` entries (a caller then keeps nothing by it).

    Args:
        root: a folder or a single file.
        hidden: paths (resolved) left out, with everything under them.
    """
    digest = hashlib.sha256(b"tree-v1")
    skip = {Path(os.path.realpath(h)) for h in hidden}
    count = 0
    # (path as found, path relative to the root, resolved folders above it)
    stack: list[tuple[Path, str, frozenset[str]]] = [(Path(root), ".", frozenset())]
    while stack:
        path, rel, above = stack.pop()
        if Path(os.path.realpath(path)) in skip:
            continue
        count += 1
        if count > max_entries:
            return None
        digest.update(f"\0{rel}\0".encode("utf-8", "surrogateescape"))
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                digest.update(b"L" + os.fsencode(os.readlink(path)) + b"\0")
                st = os.stat(path)
        except OSError:
            digest.update(b"dangling")
            continue
        digest.update(f"{stat.S_IFMT(st.st_mode)}:{stat.S_IMODE(st.st_mode):o}\0".encode())
        if stat.S_ISREG(st.st_mode):
            _file_bytes(path, digest)
        elif stat.S_ISDIR(st.st_mode):
            real = os.path.realpath(path)
            if real in above:
                digest.update(b"loop")
                continue
            try:
                names = sorted(os.listdir(path), reverse=True)
            except OSError:
                digest.update(b"unreadable")
                continue
            inner = above | {real}
            stack.extend((path / name, name if rel == "." else f"{rel}/{name}", inner) for name in names)
    return digest.hexdigest()


def _file_bytes(path: Path, digest) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # swapped for a FIFO meanwhile: never blocks
    except OSError:
        digest.update(b"unreadable")
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            digest.update(b"not-regular")
            return
        os.set_blocking(fd, True)
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
    except OSError:
        digest.update(b"unreadable")
    finally:
        os.close(fd)
