"""Size-capped filesystems under writable roots: disk caps the kernel enforces.

A watched cap (`process.DiskWatch` walking a tree) cannot see a file unlinked while it
is open, and a burst of writes passes it between two looks. So, where twin can mount
(it runs as root, and the host has loop devices and `mkfs.ext4`), each writable root of
a sandbox lives on a filesystem of its own, of the cap's size:

- a root that outlives its sandbox (the candidate) on an ext4 image (allocated whole,
  never sparse: `host_disk`; no journal, no reserved blocks), loop-mounted `nosuid,nodev`:
  `open_session` mounts the candidate for a whole run (`Session.close` releases it),
  and a sandbox mounts any writable root nobody capped yet for its own life;
- twin's own scratch directories under `stage_root()` (a probe side's work directory,
  the grader's logs) on a tmpfs of that size for the life of their sandbox.

The tree is copied in when the filesystem is mounted and out, to a plain directory at
the same path, when it is released (write errors checked, the copy flushed before it
replaces anything). A copy never carries a setuid or setgid bit nor a file capability (`_COPY`),
and a tree too large for `settle_writable` to walk whole is not copied out at all. Between
runs, and for whatever reads a run after it, the root is an ordinary directory. Every step
is recorded under `stage_root()/quota/` with its owner's process tag, so that
`recover_capped()` (run when twin starts) finishes what a killed twin left, from the step it
had reached, and an interpreter that exits without closing its sandboxes releases them at exit.

Where twin cannot mount (not root, no loop device, no `mkfs.ext4`), `CappedRoot.mount`
returns None, logs why once, and the watched cap is all there is.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from ground.agent_tree import discard_tree
from ground.boundary import Boundary
from ground.host_dirs import IsolationError, is_ours
from ground.isolation import stage_root
from ground.sandbox import SandboxError
from ground.sandboxes import quota_records as records
from ground.sandboxes.host_disk import HostDiskFull, allocate, sync_filesystem
from ground.sandboxes.owner import own_tag
from ground.sandboxes.privilege import MAX_SETTLED, settle_writable

log = logging.getLogger(__name__)
EXT4 = "ext4"
TMPFS = "tmpfs"
MAX_INODES = 200_000
_TOOLS = "/usr/sbin:/usr/bin:/sbin:/bin"
# Modes come over by the umask of 0 (`_run`), never by --preserve=mode: cp then leaves out setuid and
# setgid bits, and it copies no extended attribute (no file capability), whatever the walks did.
_COPY = ("cp", "-dR", "--preserve=ownership,timestamps,links", "--")
_ACTIVE: dict[str, CappedRoot] = {}
_LOCK = threading.Lock()
_WARNED: set[str] = set()


class CappedRoot:
    """One directory that is, until its last user calls `release()`, the root of a filesystem of `cap_mb`."""

    def __init__(self, path: Path, record: Path, kind: str, cap_mb: int) -> None:
        self.path, self.record, self.kind, self.cap_mb = path, record, kind, cap_mb
        self.users = 1
        self._fd: int | None = None  # held on the filesystem since it was mounted: syncfs sees every write error

    @classmethod
    def mount(cls, path: Path, cap_mb: int, kind: str) -> CappedRoot | None:
        """Put the directory `path` on a filesystem of `cap_mb` (its tree copied in), or return None.

        None where twin cannot mount here (then the caller keeps the watched cap), where
        `path` is a mount point already, or where the tree does not fit under the cap (it is
        then left as it was).

        Raises:
            HostDiskFull: no room on the host for the image of `cap_mb` (the tree left as it was).
        """
        path = Path(path)
        why = unavailable(kind)
        if why is not None:
            _warn_once(kind, f"writable roots are watched, not capped by a filesystem: {why}")
            return None
        if is_capped(path) or os.path.ismount(path):
            return None
        # the record is written whole under a name recover_capped() does not read, then renamed:
        # another twin starting meanwhile never sees a record without its owner
        draft = Path(tempfile.mkdtemp(prefix=records.DRAFT, dir=records.records_dir()))
        records.write_field(draft, "owner", own_tag())
        records.write_field(draft, "origin", str(path))
        records.write_field(draft, "kind", kind)
        record = draft.with_name("q" + draft.name.removeprefix(records.DRAFT))
        os.rename(draft, record)
        root = cls(path, record, kind, cap_mb)
        try:
            root._mount_in()
        except (OSError, subprocess.CalledProcessError, HostDiskFull) as exc:
            root._close()
            _recover(record)
            if isinstance(exc, HostDiskFull):
                raise
            _warn_once(f"{kind}:{path}", f"cannot put {path} on a capped {kind}: {_why(exc)}")
            return None
        with _LOCK:
            _ACTIVE[str(path)] = root
        return root

    def _mount_in(self) -> None:
        aside = _sibling(self.path, "in")
        records.write_field(self.record, "state", "in")
        st = os.lstat(self.path)
        os.rename(self.path, aside)
        os.mkdir(self.path, 0o700)
        if self.kind == EXT4:
            image = self.record / "image.ext4"
            allocate(image, self.cap_mb << 20, what=f"the capped filesystem of {self.path}")
            inodes = min(MAX_INODES, max(1024, (self.cap_mb << 20) // 16384))
            # nodiscard: mkfs would otherwise punch the allocated blocks back out of the image file
            _run("mkfs.ext4", "-q", "-F", "-m", "0", "-N", str(inodes), "-O", "^has_journal", "-E", "nodiscard",
                 str(image))  # fmt: skip
            _run("mount", "-o", "loop,nosuid,nodev", str(image), str(self.path))
            os.rmdir(self.path / "lost+found")
        else:
            options = f"size={self.cap_mb}m,nr_inodes={MAX_INODES},mode=0700,nosuid,nodev"
            _run("mount", "-t", "tmpfs", "-o", options, records.tmpfs_source(self.record), str(self.path))
        self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        _run(*_COPY, f"{aside}/.", f"{self.path}/")
        os.fchown(self._fd, st.st_uid, st.st_gid)  # the mounted root by its descriptor, never a path
        os.fchmod(self._fd, st.st_mode & 0o7777)
        records.write_field(self.record, "state", "mounted")
        discard_tree(aside)

    def check_written(self) -> None:
        """Flush the filesystem; a SandboxError if a write to it since it was mounted was lost (host out of disk)."""
        try:
            sync_filesystem(self._fd if self._fd is not None else self.path)
        except OSError as exc:
            why = f"the capped filesystem of {self.path} lost writes ({exc.strerror}): is the host out of disk?"
            raise SandboxError(why) from None

    def _follow_a_move(self) -> None:
        """Where a folder above the root was renamed meanwhile (a scratch tree set aside for removal
        while a stopped run's sandbox still used it), release the root where it is now: by its
        recorded path, the mount would be left behind."""
        try:
            now = os.readlink(f"/proc/self/fd/{self._fd}") if self._fd is not None else str(self.path)
        except OSError:
            return
        if now != str(self.path) and os.path.isabs(now) and os.path.ismount(now):
            records.write_field(self.record, "origin", now)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def release(self) -> None:
        """One user is done; the last one copies the tree out to a plain directory and unmounts.

        Idempotent once released. A copy out that fails (writes lost, no room for the copy)
        replaces nothing and leaves the root mounted and in use: a later `release()` tries again.
        """
        with _LOCK:
            if _ACTIVE.get(str(self.path)) is not self:
                return
            self.users -= 1
            if self.users > 0:
                return
            del _ACTIVE[str(self.path)]
        try:
            self.check_written()
            self._follow_a_move()
            self._close()  # before the unmount: a held descriptor keeps the filesystem busy
            _recover(self.record)
        except BaseException:
            with _LOCK:
                self.users = 1
                _ACTIVE[str(self.path)] = self
            raise


def cap_writable_roots(boundary: Boundary) -> list[CappedRoot]:
    """Capped filesystems for the boundary's writable roots that are not capped yet.

    A root under `stage_root()` (twin's scratch) gets a tmpfs, any other an ext4 image; a
    root capped already (the run's candidate) gains a user, so that it stays mounted while
    this sandbox lives. The caller releases what it gets back when its sandbox closes.
    """
    scratch = stage_root()
    capped = []
    for mount in boundary.mounts:
        if not mount.writable or not mount.host.is_dir():
            continue
        with _LOCK:
            shared = _ACTIVE.get(str(mount.host))
            if shared is not None:
                shared.users += 1
        if shared is not None:
            capped.append(shared)
            continue
        kind = TMPFS if scratch in mount.host.parents else EXT4
        root = CappedRoot.mount(mount.host, boundary.limits.disk_mb, kind)
        if root is not None:
            capped.append(root)
    return capped


def release_all(roots: list[CappedRoot]) -> None:
    """Release each root, trying every one even when one fails (the first failure is raised)."""
    failure: BaseException | None = None
    for root in roots:
        try:
            root.release()
        except (OSError, subprocess.CalledProcessError, SandboxError) as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


@atexit.register
def _release_at_exit() -> None:
    """An interpreter that exits without closing its sandboxes (an uncaught error) leaves no mount."""
    with _LOCK:
        roots = list(_ACTIVE.values())
        for root in roots:
            root.users = 1
    for root in roots:
        try:
            root.release()
        except (OSError, subprocess.CalledProcessError, SandboxError) as exc:
            log.warning("cannot release the capped root %s: %s", root.path, _why(exc))


def is_capped(path: Path) -> bool:
    """Whether `path` is, in this process, the root of a capped filesystem twin mounted."""
    with _LOCK:
        return str(path) in _ACTIVE


def unavailable(kind: str) -> str | None:
    """Why a capped filesystem of `kind` cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "twin does not run as root"
    needed = ["mount", "umount", "cp"] + (["mkfs.ext4"] if kind == EXT4 else [])
    missing = [tool for tool in needed if shutil.which(tool, path=_TOOLS) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if kind == EXT4 and not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    return None


def usage(path: Path) -> tuple[int, int, int, bool]:
    """(bytes used, inodes used, bytes left, full) of the filesystem whose root is `path`.

    Counts what the filesystem counts: files unlinked while open hold their blocks until
    closed. `full`: less than 1 MiB or no inode left, where the next write may fail.
    """
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    left = st.f_bavail * st.f_frsize
    return used, st.f_files - st.f_ffree, left, left < (1 << 20) or st.f_favail == 0


def recover_capped() -> list[Path]:
    """Release the capped roots of processes that are gone (a killed twin); run when twin starts.

    Only records twin wrote are acted on: the records' folder and each record must be this
    user's alone (`host_dirs.trusted_subdir`, `is_ours`); a stage another user could have made
    is left alone here (the next sandbox refuses it in one line).
    """
    try:
        base = records.records_dir()
        entries = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False) and is_ours(Path(e.path))]
    except (OSError, IsolationError) as exc:
        log.warning("capped roots a killed twin left are not looked for: %s", exc)
        return []
    for entry in entries:  # a record a killed twin never finished writing holds nothing to release
        draft = Path(entry.path)
        if entry.name.startswith(records.DRAFT) and not records.owner_running(draft) and records.age_s(draft) > 600:
            discard_tree(draft)
    done = []
    for record in [Path(e.path) for e in entries if e.name.startswith("q")]:
        if records.owner_running(record):
            continue
        origin = records.read_field(record, "origin")
        try:
            _recover(record)
        except (OSError, subprocess.CalledProcessError, SandboxError) as exc:
            log.warning("cannot release the capped root %s a killed twin left: %s", origin, _why(exc))
            continue
        if origin:
            done.append(Path(origin))
    return done


def _recover(record: Path) -> None:
    """Bring the root of `record` back to a plain directory, from whichever step was reached.

    `in`: the copy in did not finish, the original is aside: unmount and put it back.
    `mounted`: the filesystem holds the tree: copy it out beside the root, then as `out`.
    `out`: the copy out is complete: unmount, swap it in. Then the record (and image) goes;
    it goes at once where the folder that held the root is gone (its scratch was removed).
    """
    origin = records.read_field(record, "origin")
    if not origin:
        discard_tree(record)
        return
    path = Path(origin)
    if not path.parent.is_dir():  # the tree the root lay in was removed since: nothing to put back
        for point in records.mounted_at(record):  # but its filesystem may still be mounted where it was moved
            _unmount(point)
        discard_tree(record)
        return
    state = records.read_field(record, "state")
    image = record / "image.ext4"
    if state == "in":
        _unmount(path)
        aside = _sibling(path, "in")
        if aside.is_dir():
            discard_tree(path)
            os.rename(aside, path)
    elif state in ("mounted", "out"):
        discard_tree(_sibling(path, "in"))
        out = _sibling(path, "out")
        if state == "mounted":
            if not os.path.ismount(path) and image.is_file() and is_ours(image):  # a reboot took the mount
                subprocess.run(["e2fsck", "-p", str(image)], capture_output=True, check=False, env=_env())
                path.mkdir(exist_ok=True)
                _run("mount", "-o", "loop,nosuid,nodev", str(image), str(path))
            discard_tree(out)
            if os.path.ismount(path):
                sync_filesystem(path)  # a write error met now: nothing is copied, nothing replaced
                if not settle_writable(path):  # fail closed: what a cut-short walk left is never copied out
                    raise SandboxError(
                        f"{path} holds more than {MAX_SETTLED} names: not copied out of its capped filesystem "
                        f"(left mounted); remove names from it, or unmount it and delete it"
                    )
                os.mkdir(out, 0o700)
                try:
                    _run(*_COPY, f"{path}/.", f"{out}/")
                    # a candidate: on the host disk before it replaces anything (not per scratch tmpfs: a
                    if records.read_field(record, "kind") == EXT4:  # syncfs flushes the whole host filesystem)
                        sync_filesystem(out)
                except (OSError, subprocess.CalledProcessError):
                    discard_tree(out)  # a partial copy (the host full) is never swapped in
                    raise
                st = os.stat(path)
                out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:  # by its descriptor: the copy holds the candidate's entries, never a link followed
                    os.fchown(out_fd, st.st_uid, st.st_gid)
                    os.fchmod(out_fd, st.st_mode & 0o7777)
                finally:
                    os.close(out_fd)
            records.write_field(record, "state", "out")
        _unmount(path)
        if out.is_dir():
            discard_tree(path)
            os.rename(out, path)
        else:
            path.mkdir(exist_ok=True)  # a tmpfs lost with a reboot: its scratch is gone
    else:
        _unmount(path)
    discard_tree(record)


def _unmount(path: Path) -> None:
    """Unmount `path` if it is a mount point (detached lazily if a process still holds it)."""
    if not os.path.ismount(path):
        return
    if subprocess.run(["umount", str(path)], capture_output=True, env=_env()).returncode != 0:
        _run("umount", "-l", str(path))


def _sibling(path: Path, step: str) -> Path:
    return path.with_name(f".{path.name}.twin-{step}")


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, env=_env(), umask=0)


def _env() -> dict[str, str]:
    return {"PATH": _TOOLS, "LANG": "C"}


def _why(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"{exc.cmd[0]}: {detail[-1] if detail else f'exit {exc.returncode}'}"
    return str(exc)


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message)
