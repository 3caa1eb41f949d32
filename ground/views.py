"""Readable views: a task's files as Harbor shows them, whatever their modes on disk.

Harbor runs an agent's commands and a task's `tests/test.sh` as root in the task's
container, so a file the task ships with mode 0600 (what `numpy.savez` through a
temporary file leaves) or a directory with 0700 is readable there. When twin runs as
root, its sandboxes run as the unprivileged `SANDBOX_UID` instead, which could not
read such a file: a correct candidate would be graded 0 because its grader cannot
open its own references.

So every tree a task *gives* a sandbox read-only (tests/ to the grader, the original,
the assets, what a published task's Dockerfile lays out, the solution to `solve.sh`)
is mounted from a view: the tree itself when the sandbox uid can already read all of
it, else a copy under twin's cache, owned by root with the sandbox's group, readable
(never writable) by that group and closed to everyone else. Hidden paths inside the
tree are left out of the copy. The candidate, which an agent wrote, is never given a
view: its files keep their modes.

The interpreter twin runs, where it lives under a folder the sandbox uid cannot enter
(pyenv under `/root`), is copied once the same way (`interpreter_copy`).

A copy is keyed by the tree's path and its content (`ground.tree_digest`: every
file's bytes, links resolved, byte code included; never sizes and modification times,
which can be set back), so an edited task gets a fresh one; older copies of the same tree
are removed once they are a day old.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ground.boundary import Mount
from ground.linked_tree import link_or_copy
from ground.tree_digest import content_digest
from ground.waiting import waiting_for

_STALE_S = 24 * 3600.0
_MAX_ENTRIES = 200_000


def readable_by(st: os.stat_result, uid: int, gid: int, *, directory: bool) -> bool:
    """Whether `uid`/`gid` (no other groups) may read the entry (and, a directory, enter it)."""
    mode = st.st_mode
    if st.st_uid == uid:
        need = stat.S_IRUSR | (stat.S_IXUSR if directory else 0)
    elif st.st_gid == gid:
        need = stat.S_IRGRP | (stat.S_IXGRP if directory else 0)
    else:
        need = stat.S_IROTH | (stat.S_IXOTH if directory else 0)
    return mode & need == need


def tree_entries(
    root: Path, hidden: Sequence[Path], max_entries: int = _MAX_ENTRIES
) -> list[tuple[str, os.stat_result]] | None:
    """Every entry under `root` (relative path, lstat; links not followed), hidden paths left out;
    None: more than `max_entries`."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in children:
            path = Path(entry.path)
            if path in hidden:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            out.append((str(path.relative_to(root)), st))
            if len(out) > max_entries:
                return None
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
    return out


def readable_view(
    root: Path, hidden: Sequence[Path], *, cache: Path, uid: int, gid: int, closed: bool = False
) -> Path:
    """`root`, or a copy of it under `cache` that `uid`/`gid` can read in full.

    Nothing changes when twin is not root (its sandboxes run as its own uid), when
    `root` is not a directory, or when `uid`/`gid` can already read every entry.

    Args:
        root: a tree a task gives a sandbox read-only.
        hidden: the sandbox's hidden roots; those inside `root` are left out of a copy.
        cache: twin's cache directory (the copy goes under `cache/views`).
        uid, gid: who runs the sandbox.
        closed: copy even a readable tree, so that no one but root and `gid` can enter it (a
            grader's `tests/`: the candidate's side a grader drops to another uid must not).

    Returns:
        The directory to mount in place of `root`.

    Raises:
        OSError: the copy could not be written.
    """
    root = Path(os.path.realpath(root))
    if os.geteuid() != 0:
        return root
    if root.is_file() and closed:
        raise OSError(f"{root}: only a folder can be given as a closed view")
    if root.is_file():
        return _file_view(root, cache=cache, uid=uid, gid=gid)
    if not root.is_dir():
        return root
    inside = [Path(os.path.realpath(h)) for h in hidden]
    inside = [h for h in inside if root in h.parents]
    top = os.stat(root)
    entries = tree_entries(root, inside)
    if entries is None:
        return root  # too large to copy: the sandbox's own limits decide what it may read
    if not closed and readable_by(top, uid, gid, directory=True) and all(
        stat.S_ISLNK(st.st_mode) or readable_by(st, uid, gid, directory=stat.S_ISDIR(st.st_mode))
        for _name, st in entries
    ):
        return root
    tree_key = hashlib.sha256(f"view-v1\0{root}\0{uid}\0{gid}\0{closed}".encode()).hexdigest()[:16]
    content = content_digest(root, hidden=inside)  # None (too large with its links): a fresh copy, never reused
    views = cache / "views"
    target = views / f"{tree_key}-{content[:32] if content else 'u' + uuid.uuid4().hex}"
    if content is not None and target.is_dir():
        return target
    views.mkdir(parents=True, exist_ok=True)
    os.chmod(views, 0o711)
    staging = Path(tempfile.mkdtemp(prefix=f".{tree_key}-", dir=views))
    try:
        copy = staging / "t"
        copy.mkdir()
        with waiting_for(f"a copy of {root} the sandbox uid can read (under {views})"):
            for name, st in entries:
                _copy_entry(root / name, copy / name, st, gid)
            _close_to_others(copy, 0o750, gid)
        try:
            copy.rename(target)
        except OSError:
            pass  # made at the same time by another process
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _remove_stale(views, tree_key, keep=target)
    return target


def _file_view(path: Path, *, cache: Path, uid: int, gid: int) -> Path:
    """A single laid-out file: itself when readable, else a copy (same name) in its own view."""
    st = os.stat(path)
    if readable_by(st, uid, gid, directory=False):
        return path
    content = content_digest(path)
    key = hashlib.sha256(f"file-v2\0{path}\0{gid}\0{content}".encode()).hexdigest()[:24]
    folder = cache / "views" / f"f{key}"
    if not (folder / path.name).is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(folder.parent, 0o711)
        staging = Path(tempfile.mkdtemp(prefix=f".f{key}-", dir=folder.parent))
        try:
            _copy_entry(path, staging / path.name, st, gid)
            _close_to_others(staging, 0o750, gid)
            try:
                staging.rename(folder)
            except OSError:
                pass  # made at the same time by another process
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder / path.name


def _copy_entry(source: Path, dest: Path, st: os.stat_result, gid: int) -> None:
    """One entry of a view: directories 0750, files 0640 (0750 if executable), links as links."""
    if stat.S_ISDIR(st.st_mode):
        dest.mkdir()
        _close_to_others(dest, 0o750, gid)
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), dest)
    elif stat.S_ISREG(st.st_mode):
        shutil.copyfile(source, dest, follow_symlinks=False)
        _close_to_others(dest, 0o750 if st.st_mode & 0o111 else 0o640, gid)
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    # sockets, fifos and devices are left out: a read-only tree has no use for them


def _close_to_others(path: Path, mode: int, gid: int) -> None:
    os.chown(path, 0, gid, follow_symlinks=False)
    os.chmod(path, mode)


def _remove_stale(views: Path, tree_key: str, *, keep: Path) -> None:
    """Remove other copies of the same tree that have not been made for a day."""
    now = time.time()
    for old in views.glob(f"{tree_key}-*"):
        try:
            if old != keep and now - old.stat().st_mtime > _STALE_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue


def readable_mounts(
    mounts: Sequence[Mount],
    hidden: Sequence[Path],
    *,
    cache: Path,
    uid: int,
    gid: int,
    closed: Sequence[str] = (),
) -> list[Mount]:
    """`mounts` (read-only ones a task gives) with each host replaced by its readable view.

    Mounts whose point inside is in `closed` always get a closed copy (`readable_view`).
    """
    out = []
    for mount in mounts:
        shut = mount.inside in closed
        view = (
            mount.host
            if mount.writable
            else readable_view(mount.host, hidden, cache=cache, uid=uid, gid=gid, closed=shut)
        )
        out.append(mount if view == Path(os.path.realpath(mount.host)) else mount.model_copy(update={"host": view}))
    return out


def interpreter_copy(root: Path, *, cache: Path) -> Path:
    """A cached copy of an interpreter prefix under `cache/roots` (world-readable, as installed).

    Its files are hard links to the prefix's own where the cache is on the same filesystem (the
    same files, with their modes: nothing here changes one); it is only ever mounted read-only.

    A base interpreter's own site-packages is left out when the running interpreter is a
    virtual environment that does not use it.

    Raises:
        OSError: the copy could not be written.
    """
    st = root.stat()
    key = hashlib.sha256(f"copy-v1\0{root}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    target = cache / "roots" / key
    if target.is_dir():
        return target
    skip = None
    if sys.prefix != sys.base_prefix and not _uses_system_site_packages():
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        skip = Path(sys.base_prefix).resolve() / "lib" / version / "site-packages"

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if skip is not None and Path(directory) / n == skip}

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    try:
        # hard links where they can be made: a second view of the prefix, not a copy of it (`linked_tree`)
        with waiting_for(f"{root} laid out where the sandbox uid can reach it (under {target.parent})"):
            shutil.copytree(root, staging / "t", symlinks=True, ignore=ignore, copy_function=link_or_copy)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # a partial copy (a full disk) nobody would reuse
        raise
    # the base's site-packages lies inside `root` only when `root` is the base prefix itself
    # (pyenv under /root); a venv under /root made from the system's Python leaves it out anyway
    if skip is not None and skip.is_relative_to(root) and (staging / "t" / skip.relative_to(root)).parent.is_dir():
        (staging / "t" / skip.relative_to(root)).mkdir(exist_ok=True)
    (staging / "t").chmod(0o755)
    try:
        (staging / "t").rename(target)
    except OSError:
        pass  # built at the same time elsewhere
    shutil.rmtree(staging, ignore_errors=True)
    return target


def _uses_system_site_packages() -> bool:
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    try:
        text = cfg.read_text()
    except OSError:
        return True
    return "include-system-site-packages = true" in text.replace("\t", " ").lower()
