"""Where twin keeps its own files on the host: the cache and the stage directory.

Both must be reachable by the sandbox uid (it mounts what lies there), so neither may
lie where that uid cannot traverse (root's home, a `mkdtemp` directory).

The stage lies in a folder every user can write (`/var/tmp`), and root acts on what it
finds there (mounts, renames, recovery after a killed twin), so twin trusts no directory
of it that another user could have made: the stage root is reached one component at a time
(`openat` with `O_NOFOLLOW`: no link is ever followed), each folder above it must be owned
by root or this user and writable by no one else unless sticky, and the stage root itself,
and each of twin's folders and records in it, must be owned by this user and writable by no
one else. Anything else is refused in one line that says what to remove.

Root trusts its cache by the same rule, checked by the same walk: what lies there (reference
environments, originals, site-packages copies, views) is mounted into sandboxes and run, so a
cache root another user could have made, changed or replaced (a link, a folder of theirs, one
they can write, or under a folder they can write that is not sticky) is refused before twin
uses it. A sticky folder above (`/tmp`) is accepted as it is for the stage: no other user may
rename or remove root's entry in it, and whatever they made at the name first is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ground.errors import TwinError


class IsolationError(TwinError):
    """A sandbox's fixed parts (the `/etc` snapshot, the cache, the stage) could not be prepared."""


CACHE_DIR = "/var/cache/twin"
"""Root's cache (`cache_root`), unless `$TWIN_CACHE_DIR` names another."""

_trusted_caches: dict[Path, Path] = {}
"""Cache roots this process has checked (as given -> as walked): once root's alone, only root can change them."""


def cache_root() -> Path:
    """Where twin keeps derived files sandboxes mount (`$TWIN_CACHE_DIR`, else a per-user cache).

    As root the default is `/var/cache/twin`: the sandbox uid must be able to reach what
    it mounts, and root's home is closed to it. As root the cache is also checked as the
    stage is (`open_trusted_dir`: no link, every folder above root's and closed unless
    sticky, the cache itself root's and writable by no one else; made 0755 where missing)
    and returned as walked (the folder above it resolved).

    Raises:
        IsolationError: as root, the cache or a folder above it is a link, belongs to another
            user or can be written by another user (one line naming it and what to do).
    """
    configured = os.environ.get("TWIN_CACHE_DIR")
    if os.geteuid() != 0:
        return Path(configured or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "twin")
    given = Path(configured or CACHE_DIR)
    known = _trusted_caches.get(given)
    if known is None:
        known = _resolved(given)
        os.close(_walk_trusted(known, mode=0o755, setting="TWIN_CACHE_DIR"))
        _trusted_caches[given] = known
    return known


STAGE_DIR = "/var/tmp/twin-stage"
"""The shared stage directory (`stage_root`), unless `$TWIN_STAGE_DIR` names another."""


def stage_root() -> Path:
    """A directory the sandbox uid can traverse (not list) for staged mount points.

    `$TWIN_STAGE_DIR`, else `/var/tmp/twin-stage`; where that one is not this user's (root
    made it, this twin is not root), `/var/tmp/twin-stage-<uid>`: only an owner may change
    a directory's mode, and a directory someone else controls is no place for this user's
    scratch. Made where missing, its mode set to 0711 through its own descriptor.

    Raises:
        IsolationError: the stage, or a folder above it, is a link, belongs to another user
            or can be written by another user (one line naming it and what to do).
    """
    configured = os.environ.get("TWIN_STAGE_DIR")
    root = Path(configured or STAGE_DIR)
    try:
        return _stage_at(root)
    except IsolationError:
        if configured or os.geteuid() == 0:
            raise
    return _stage_at(root.with_name(f"{root.name}-{os.geteuid()}"))


def _stage_at(root: Path) -> Path:
    fd = open_trusted_dir(root, mode=0o711)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o711:
            os.fchmod(fd, 0o711)
    finally:
        os.close(fd)
    return Path(os.path.realpath(root.parent)) / root.name


def open_trusted_dir(path: Path, *, mode: int = 0o700, setting: str = "TWIN_STAGE_DIR") -> int:
    """A descriptor of the directory `path`, made with `mode` if missing, that no other user controls.

    The folder above it is resolved once, then every component is opened below the one
    before without following a link: each must be a directory owned by root or this user
    and writable by nobody else (a sticky folder such as `/tmp` excepted); `path` itself must
    be owned by this user and writable by nobody else.

    Args:
        path: the folder (the stage, one of its folders, the cache).
        mode: its mode where it is made.
        setting: the variable that moves it elsewhere, named in a refusal.

    Raises:
        IsolationError: a component is missing and cannot be made, is a link or not a
            folder, or fails the ownership or mode check (one line saying what to fix).
    """
    return _walk_trusted(_resolved(path), mode=mode, setting=setting)


def _resolved(path: Path) -> Path:
    """`path` with the folder above it resolved (links, `..`); its own last component kept as named."""
    return Path(os.path.realpath(Path(path).parent)) / Path(path).name


def _walk_trusted(path: Path, *, mode: int, setting: str) -> int:
    """`open_trusted_dir` on a path already resolved: every component opened without following a link."""
    parts = path.parts[1:]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, name in enumerate(parts):
            final = depth == len(parts) - 1
            here = Path("/", *parts[: depth + 1])
            try:
                child = _open_below(fd, name, mode if final else 0o755)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    why = f"cannot open or make {here} ({exc.strerror}): set {setting} to a folder you can write"
                    raise IsolationError(why) from None
                raise IsolationError(f"{here} is a link or not a folder: {_fix(here, final, setting, mode)}") from None
            os.close(fd)
            fd = child
            why = untrusted(os.fstat(fd), above=not final)
            if why is not None:
                raise IsolationError(f"{here} {why}: {_fix(here, final, setting, mode, why)}")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_below(dir_fd: int, name: str, mode: int) -> int:
    """The folder `name` under `dir_fd`, never through a link; made with `mode` where missing."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
        except FileExistsError:
            pass  # made meanwhile: opened and checked like any other
        return os.open(name, flags, dir_fd=dir_fd)


def _fix(path: Path, final: bool, setting: str, mode: int, why: str = "") -> str:
    """What to do about an untrusted folder: twin's own is removed (twin makes it anew) or closed,
    one above it is avoided (by `setting`, the variable that moves it)."""
    if not final:
        return f"another user could change what lies below it; set {setting} to a folder only root or you can write"
    if why.startswith("can be written"):
        return (
            f"another user could change what lies in it; set {setting} to a folder of twin's own "
            f"(twin makes it, {mode:04o}), or chmod go-w {path} if it is one"
        )
    return f"another user could have made or changed it; remove {path} (twin makes it anew) or set {setting}"


def untrusted(st: os.stat_result, *, above: bool = False) -> str | None:
    """Why a folder or record with this `lstat`/`fstat` is not twin's own to trust, or None.

    Args:
        above: a folder above one of twin's (owned by root or this user, and writable by
            others only where sticky, as `/tmp` is), not one of twin's own.
    """
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        return "is a link"
    if st.st_uid != me and not (above and st.st_uid == 0):
        return f"belongs to uid {st.st_uid}"
    if st.st_mode & 0o022 and not (above and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        return "can be written by group or others"
    return None


def trusted_subdir(parent: Path, name: str) -> Path:
    """`parent/name`, made 0700 where missing, refused unless it is a folder of this user's alone.

    For the records root acts on (recovery after a killed twin): another user must have been
    unable to make or change any of them.

    Raises:
        IsolationError: it is a link, not a folder, another user's, or open to group or others.
    """
    path = Path(parent) / name
    fd = open_trusted_dir(path, mode=0o700)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise IsolationError(f"{path} is open to group or others: chmod 0700 {path}, or remove it (twin makes it anew)")
    return path


def is_ours(path: Path) -> bool:
    """Whether `path` (not followed if a link) is this user's alone: owned by it, written by nobody else."""
    try:
        return untrusted(os.lstat(path)) is None
    except OSError:
        return False


def read_ours(path: Path, limit: int = 1 << 16) -> str:
    """The text of a record twin wrote (at most `limit` bytes); "" where it is missing, a link,
    not a regular file, or not this user's alone (never a record to act on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or untrusted(st) is not None:
            return ""
        return os.read(fd, limit).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)
