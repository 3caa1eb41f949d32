"""One content digest of a tree as a sandbox that mounts it will see it.

twin keeps work keyed by what a tree holds: a readable view of a task's folder is reused while
the folder holds the same (`ground.views`), and a task that passed its check is not
checked again while the task holds the same (`benchmark_adapter.grading.check`), and a probe's
reference run is re-used while the original and its assets hold the same
(`probes.reference_cache`). A key made of
sizes and modification times can be kept while the content changes (both can be set back), and
a key that skips what the sandbox runs (byte code in `__pycache__`, a linked folder's files) is
no key at all; so all three use this digest:

- every entry's path relative to the root, its kind and permission bits;
- every folder's sorted list of names, each with the kind of entry it names (as `lstat` sees it);
- every regular file's length and bytes, whatever its size or name (`__pycache__` included);
- a symbolic link is resolved as the sandbox resolves it on the host's files: its text, and
  in its place what it points to (a file's bytes, a folder's entries); a link to a folder it
  sits in is marked a loop, never followed again; a dangling one is marked so.

Every piece goes into the hash as one field with its length before it, so the stream reads back
one way only: a file's bytes cannot pass for the next entry's header, nor a folder's missing
name for an empty file (`KEY_VERSION` names this encoding; a key made by an earlier one never
matches).

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
KEY_VERSION = b"tree-v2"
"""The encoding's name, the digest's first field: a new encoding gets a new one."""


def content_digest(root: Path, *, hidden: Sequence[Path] = (), max_entries: int = MAX_ENTRIES) -> str | None:
    """The sha256 (hex) of `root` as described in the module docstring; None where the tree, its
    links followed, has more than `max_entries` entries (a caller then keeps nothing by it).

    Args:
        root: a folder or a single file.
        hidden: paths (resolved) left out, with everything under them.
    """
    digest = hashlib.sha256()
    field = _Fields(digest)
    field(KEY_VERSION)
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
        field(b"entry", os.fsencode(rel))
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                field(b"link", os.fsencode(os.readlink(path)))
                st = os.stat(path)
        except OSError:
            field(b"dangling")
            continue
        field(b"mode", f"{stat.S_IFMT(st.st_mode)}:{stat.S_IMODE(st.st_mode):o}".encode())
        if stat.S_ISREG(st.st_mode):
            field(b"bytes", *_file_bytes(path))
        elif stat.S_ISDIR(st.st_mode):
            real = os.path.realpath(path)
            if real in above:
                field(b"loop")
                continue
            try:
                names = sorted(os.listdir(path))
            except OSError:
                field(b"unreadable")
                continue
            names = [name for name in names if Path(os.path.realpath(path / name)) not in skip]
            field(b"names", *(part for name in names for part in (os.fsencode(name), _kind(path / name))))
            inner = above | {real}
            stack.extend((path / name, name if rel == "." else f"{rel}/{name}", inner) for name in reversed(names))
    return digest.hexdigest()


class _Fields:
    """Feeds a hash with fields, each with its length before it (8 bytes, big-endian)."""

    def __init__(self, digest) -> None:
        self.digest = digest

    def __call__(self, *parts: bytes) -> None:
        self.digest.update(len(parts).to_bytes(8, "big"))
        for part in parts:
            self.digest.update(len(part).to_bytes(8, "big") + part)


def _kind(path: Path) -> bytes:
    """The kind of entry `path` is, not following a link (`l`, `d`, `f` or the raw type bits)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return b"gone"
    if stat.S_ISLNK(mode):
        return b"l"
    if stat.S_ISDIR(mode):
        return b"d"
    if stat.S_ISREG(mode):
        return b"f"
    return f"{stat.S_IFMT(mode):o}".encode()


def _file_bytes(path: Path) -> tuple[bytes, bytes]:
    """What a regular file holds as two fields: its length and the sha256 of its bytes (or why neither)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # swapped for a FIFO meanwhile: never blocks
    except OSError:
        return b"unreadable", b""
    inner = hashlib.sha256()
    length = 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b"not-regular", b""
        os.set_blocking(fd, True)
        while chunk := os.read(fd, _CHUNK):
            inner.update(chunk)
            length += len(chunk)
    except OSError:
        return b"unreadable", b""
    finally:
        os.close(fd)
    return str(length).encode(), inner.digest()
