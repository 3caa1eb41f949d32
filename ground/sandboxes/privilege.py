"""Never host root inside a sandbox: the uid switch, staged mount sources, writable-root ownership.

When twin runs as root (as CI does), every sandbox is started through `setpriv`
as the unprivileged host uid `SANDBOX_UID`, with no capabilities, an empty
bounding set and `no_new_privs`; bubblewrap then builds the sandbox without
privileges (its user namespace maps that uid, nothing else). Files the sandbox
must write are handed to that uid before each command (`settle_writable`);
everything else stays root's and is read-only to it.

An unprivileged bubblewrap resolves mount sources with the sandbox uid's rights,
so a source under a directory it cannot traverse (`/root`, a `mkdtemp` directory)
is first bound, in a private mount namespace that only this command has, onto a
neutral staging path (`stage_root()`); the host's own mount table never changes.
When twin is not root, the sandbox runs as twin's own uid and none of this applies.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from ground.agent_tree import discard_tree
from ground.isolation import SANDBOX_GID, SANDBOX_UID, reachable, stage_root
from ground.sandbox import SandboxError

_SETID = stat.S_ISUID | stat.S_ISGID
MAX_SETTLED = 500_000
"""The most names `settle_writable` walks: past it, the tree is refused its copy out."""
_STALE_STAGING_S = 24 * 3600.0
# Makes the mounts given as arguments (`bind SRC DST`, `noexec PATH`, `tmpfs OPTIONS DST`, up
# to `--`), then becomes the command. `noexec` binds a path onto itself and remounts that bind
# read-only and noexec; every mount a later bubblewrap binds from it keeps the flag (the kernel
# locks it for a less privileged user namespace).
_STAGE_SCRIPT = (
    'fail() { echo "twin: cannot stage a sandbox mount" >&2; exit 125; }; '
    'while [ "$1" != "--" ]; do case "$1" in '
    'bind) mount --bind -- "$2" "$3" || fail; shift 3;; '
    'noexec) { mount --bind -- "$2" "$2" && mount -o remount,bind,ro,noexec,nosuid,nodev -- "$2"; } || fail; '
    "shift 2;; "
    'tmpfs) mount -t tmpfs -o "$2" -- tmpfs "$3" || fail; shift 3;; '
    '*) fail;; esac; done; shift; exec "$@"'
)


def dropping_root() -> bool:
    """Whether sandboxes must switch away from host root (twin runs as root)."""
    return os.geteuid() == 0


def unprivileged_prefix() -> list[str]:
    """`setpriv` arguments that make the next program the sandbox uid, without any capability.

    Raises:
        SandboxError: twin runs as root and setpriv is missing (never run a sandbox as root).
    """
    if not dropping_root():
        return []
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if setpriv is None:
        raise SandboxError(
            "twin runs as root and setpriv (util-linux) is missing: sandboxes never run as "
            "host root; install util-linux or run twin as an ordinary user"
        )
    return [
        setpriv,
        f"--reuid={SANDBOX_UID}",
        f"--regid={SANDBOX_GID}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def unprivileged_exec(program: str) -> list[str]:
    """The argv that runs `program` (its arguments appended) as the sandbox uid, without any capability.

    Where twin is root, `capsh` (libcap) does the switch when it is installed and this
    machine's capsh was seen to give exactly what `setpriv` gives (`_capsh_switch`): it
    costs about half of setpriv's start, whose user and locale look-ups dominate a trivial
    sandboxed command. Otherwise `unprivileged_prefix()`'s setpriv does it.

    Raises:
        SandboxError: twin runs as root and neither program can switch (never run a sandbox as root).
    """
    if not dropping_root():
        return [program]
    capsh = _capsh_switch()
    if capsh is not None:
        return [*capsh, f"--shell={program}", "--"]
    return [*unprivileged_prefix(), program]


@functools.cache
def _capsh_switch() -> tuple[str, ...] | None:
    """capsh's arguments for the switch, once this process saw them leave nothing: else None.

    The bounding, inheritable and ambient sets dropped, no supplementary groups, the sandbox
    gid then uid, and no_new_privs, in that order (dropping the bounding set needs the
    capabilities the uid switch clears). A capsh that fails, or leaves any of this otherwise
    than setpriv would (an older libcap that does not know every capability of the kernel),
    is not used.
    """
    capsh = shutil.which("capsh", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if capsh is None:
        return None
    switch = (
        capsh,
        "--drop=all",
        "--inh=",
        "--noamb",
        "--groups=",
        f"--gid={SANDBOX_GID}",
        f"--uid={SANDBOX_UID}",
        "--no-new-privs",
    )
    try:
        seen = subprocess.run(
            [*switch, "--shell=/bin/cat", "--", "/proc/self/status"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin", "LANG": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(line.split(":", 1) for line in seen.stdout.splitlines() if ":" in line)
    fields = {key: " ".join(value.split()) for key, value in fields.items()}
    uid, gid = " ".join([str(SANDBOX_UID)] * 4), " ".join([str(SANDBOX_GID)] * 4)
    wanted = {"Uid": uid, "Gid": gid, "Groups": "", "NoNewPrivs": "1"}
    wanted |= {cap: "0" * 16 for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    if seen.returncode != 0 or any(fields.get(key) != value for key, value in wanted.items()):
        return None
    return switch


class Staging:
    """Mounts made for one sandbox before bubblewrap starts, in a private mount namespace of each command.

    `path(host)` returns where bubblewrap should bind from: a neutral staging path for a source
    the sandbox uid cannot reach (twin as root). `noexec(path)` makes a source bubblewrap binds
    non-executable, and `tmpfs(options)` a fresh tmpfs (noexec where asked) to bind at `/tmp`
    or `/dev/shm`: bubblewrap has no flag for either. `prefix()` is the command line that makes
    them before the rest of the command runs; the host's mount table never changes. As root it
    mounts as root before the uid switch; otherwise it mounts in a user namespace of its own
    (`unshare --map-root-user`), where the bubblewrap it becomes must be told twin's uid and gid
    (`bwrap_identity()`). `close()` removes the (empty) staging points.
    """

    def __init__(self) -> None:
        self._pairs: list[tuple[str, str]] = []
        self._steps: list[tuple[str, ...]] = []  # noexec and tmpfs mounts, after the binds
        self._points = 0
        self._dir: Path | None = None

    def path(self, host: Path) -> Path:
        if not dropping_root() or reachable(host):
            return host
        for source, target in self._pairs:
            if source == str(host):
                return Path(target)
        target = self._point(host.is_dir())
        self._pairs.append((str(host), str(target)))
        return target

    def noexec(self, source: Path) -> None:
        """Make `source` (a path `path()` returned) read-only and non-executable for this sandbox."""
        self._steps.append(("noexec", str(source)))

    def tmpfs(self, options: str) -> Path:
        """A mount point where each command gets a fresh tmpfs mounted with `options`."""
        target = self._point(True)
        self._steps.append(("tmpfs", options, str(target)))
        return target

    def _point(self, directory: bool) -> Path:
        """A fresh, empty staging point (a directory or a file) under this sandbox's staging directory."""
        if self._dir is None:
            base = stage_root()
            sweep_stale_staging(base)
            self._dir = Path(tempfile.mkdtemp(prefix="s", dir=base))
            os.chmod(self._dir, 0o711)
        target = self._dir / str(self._points)
        self._points += 1
        if directory:
            target.mkdir(mode=0o755)
        else:
            target.touch(mode=0o644)
        return target

    def bwrap_identity(self) -> list[str]:
        """bubblewrap's `--uid`/`--gid`, where `prefix()` runs it in a user namespace that maps twin's
        uid to 0 (twin not root): inside the sandbox, commands keep twin's own uid and gid."""
        if dropping_root() or not self._steps:
            return []
        return ["--uid", str(os.getuid()), "--gid", str(os.getgid())]

    def prefix(self) -> list[str]:
        if not self._pairs and not self._steps:
            return []
        for source, target in self._pairs:  # a sweep may have removed a long-lived point
            if not os.path.lexists(target):
                os.makedirs(os.path.dirname(target), mode=0o711, exist_ok=True)
                if os.path.isdir(source):
                    os.mkdir(target, 0o755)
                else:
                    Path(target).touch(mode=0o644)
        for kind, *_, target in self._steps:
            if kind == "tmpfs" and not os.path.lexists(target):
                os.makedirs(target, mode=0o755)
        unshare = shutil.which("unshare", path="/usr/bin:/bin")
        if unshare is None:
            raise SandboxError("unshare (util-linux) is missing: cannot stage sandbox mounts")
        user = [] if dropping_root() else ["--user", "--map-root-user"]
        args = [unshare, *user, "--mount", "--propagation", "private", "--", "/bin/sh", "-c"]
        args += [_STAGE_SCRIPT, "twin-stage"]
        for source, target in self._pairs:
            args += ["bind", source, target]
        return [*args, *(word for step in self._steps for word in step), "--"]

    def close(self) -> None:
        if self._dir is not None:
            discard_tree(self._dir)
            self._dir = None


def sweep_stale_staging(base: Path, max_age_s: float = _STALE_STAGING_S) -> None:
    """Remove staging directories of sandboxes that were never closed (a killed harness)."""
    now = time.time()
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        try:
            if (
                entry.name.startswith("s")
                and entry.is_dir(follow_symlinks=False)
                and now - entry.stat(follow_symlinks=False).st_mtime > max_age_s
            ):
                discard_tree(entry.path)
        except OSError:
            continue


def settle_writable(root: Path, *, max_entries: int | None = None) -> bool:
    """Hand a writable root to the sandbox uid and strip setuid/setgid bits from what is in it.

    Called before a command (files the harness wrote become the sandbox's) and after
    it (nothing leaves the sandbox with a setuid or setgid bit). The walk goes through
    directory file descriptors, so a path swapped for a symbolic link while it runs
    (another command of the same sandbox may be running) is never followed; other
    filesystems are not entered. A regular file with several links keeps its owner (it
    could be another file's name) but loses its setuid/setgid bits like every other
    file: stripping them never grants anything.

    Returns:
        Whether the whole tree was walked: False where it holds more than `max_entries`
        names (default `MAX_SETTLED`), and some were left as they were; a copy out of the
        sandbox's filesystem is then refused (`quota`).
    """
    cap = MAX_SETTLED if max_entries is None else max_entries
    owner = SANDBOX_UID if dropping_root() else None
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return True  # no folder there (or a link, never followed): nothing left unsettled
    root_dev = os.fstat(top).st_dev
    _settle_entry(top, owner)
    stack = [top]
    seen = 0
    while stack:
        dir_fd = stack.pop()
        try:
            names = os.listdir(dir_fd)
        except OSError:
            names = []
        for name in names:
            seen += 1
            if seen > cap:
                break
            child, st = _open_child(dir_fd, name, root_dev)
            if child is None:
                _settle_name(dir_fd, name, owner, st)
                continue
            _settle_entry(child, owner)
            stack.append(child)
        os.close(dir_fd)
        if seen > cap:
            for fd in stack:
                os.close(fd)
            return False
    return True


def _open_child(dir_fd: int, name: str, root_dev: int) -> tuple[int | None, os.stat_result | None]:
    """A descriptor of the subdirectory `name` on the same device (None: not one), and its lstat (None: gone).

    The lstat is handed on, so that an entry that is not such a directory is examined once.
    """
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return None, None
    if not stat.S_ISDIR(st.st_mode) or st.st_dev != root_dev:
        return None, st
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None, st
    return fd, st


def _settle_entry(fd: int, owner: int | None) -> None:
    """Owner and setid bits of an open directory."""
    st = os.fstat(fd)
    try:
        if owner is not None and st.st_uid != owner:
            os.fchown(fd, owner, SANDBOX_GID)
        if st.st_mode & _SETID:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~_SETID)
    except OSError:
        pass


def _settle_name(dir_fd: int, name: str, owner: int | None, st: os.stat_result | None = None) -> None:
    """Owner and setid bits of a non-directory entry, without following a link (`st`: its lstat, if taken)."""
    if st is None:
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except OSError:
            return
    try:
        shared = stat.S_ISREG(st.st_mode) and st.st_nlink > 1
        if owner is not None and st.st_uid != owner and not shared:
            os.chown(name, owner, SANDBOX_GID, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_mode & _SETID:
            _strip_setid(dir_fd, name, st.st_ino)
    except OSError:
        pass


def _strip_setid(dir_fd: int, name: str, ino: int) -> None:
    """Clear the setuid/setgid bits of the regular file `name`, never through a link.

    The file is opened as a path only (`O_PATH | O_NOFOLLOW`: no read permission needed,
    a link is opened as the link itself) and changed through its descriptor, so a name
    swapped meanwhile is never followed.
    """
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if stat.S_ISREG(now.st_mode) and now.st_ino == ino and now.st_mode & _SETID:
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(now.st_mode) & ~_SETID)
    finally:
        os.close(fd)
