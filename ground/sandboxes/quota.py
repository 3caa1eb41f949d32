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
replaces anything). A copy never carries a setuid or setgid bit nor a file capability (`COPY_TREE`),
and a tree too large for `settle_writable` to walk whole is not copied out at all. Between
runs, and for whatever reads a run after it, the root is an ordinary directory. Every step
is recorded under `stage_root()/quota/` with its owner's process tag, so that
`recover_capped()` (run when twin starts, `quota_recovery`) finishes what a killed twin left, from the step it
had reached, and an interpreter that exits without closing its sandboxes releases them at exit.
Recovery acts only on a record's origin that is a place twin puts a root (an absolute, normal
path with a name: `quota_records.origin_refusal`), never on '/' or a path read back garbled.
Sandboxes built at once in one process (probes run in threads) mount a root one at a time and
share it; a root whose filesystem was unmounted under its users says so (`CappedRoot.lost`).

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
from ground.isolation import stage_root
from ground.sandbox import SandboxError
from ground.sandboxes import quota_records as records
from ground.sandboxes.host_disk import HostDiskFull, allocate, sync_filesystem
from ground.sandboxes.owner import own_tag
from ground.sandboxes.quota_records import EXT4, TMPFS
from ground.sandboxes.quota_recovery import (
    COPY_TREE,
    TOOLS_PATH,
    recover_capped,
    recover_record,
    run_tool,
    sibling,
    why_failed,
)

__all__ = ["EXT4", "TMPFS", "CappedRoot", "cap_writable_roots", "lost_roots", "recover_capped", "release_all"]

log = logging.getLogger(__name__)
MAX_INODES = 200_000
_ACTIVE: dict[str, CappedRoot] = {}
_LOCK = threading.Lock()
# Held from the look at a root to the end of its mount, and through a release: two sandboxes built at once
# (probes run in threads) never both set the same tree aside, nor mount over a root that is being released.
_MOUNTING = threading.RLock()
_WARNED: set[str] = set()


class CappedRoot:
    """One directory that is, until its last user calls `release()`, the root of a filesystem of `cap_mb`."""

    def __init__(self, path: Path, record: Path, kind: str, cap_mb: int) -> None:
        self.path, self.record, self.kind, self.cap_mb = path, record, kind, cap_mb
        self.users = 1
        self._fd: int | None = None  # held on the filesystem since it was mounted: syncfs sees every write error
        self._set_aside = False  # whether the tree was moved aside (the first step that changes anything)

    @classmethod
    def mount(cls, path: Path, cap_mb: int, kind: str) -> CappedRoot | None:
        """Put the directory `path` on a filesystem of `cap_mb` (its tree copied in), or return None.

        None where twin cannot mount here (then the caller keeps the watched cap), where
        `path` is a mount point already (also one that became so after the look: the rename
        that sets its tree aside is refused, EBUSY, and nothing at `path` is touched), is no
        place for a root (`quota_records.origin_refusal`), or where the tree does not fit
        under the cap (it is then left as it was).

        Raises:
            HostDiskFull: no room on the host for the image of `cap_mb` (the tree left as it was).
        """
        path = Path(os.path.abspath(path))
        why = unavailable(kind)
        if why is not None:
            _warn_once(kind, f"writable roots are watched, not capped by a filesystem: {why}")
            return None
        refused = records.origin_refusal(str(path))
        if refused is not None:
            _warn_once(f"{kind}:{path}", f"cannot put {path} on a capped {kind}: {refused}")
            return None
        with _MOUNTING:
            if is_capped(path) or os.path.ismount(path):
                return None
            return cls._mount_new(path, cap_mb, kind)

    @classmethod
    def _mount_new(cls, path: Path, cap_mb: int, kind: str) -> CappedRoot | None:
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
            if root._set_aside:
                recover_record(record)
            else:  # nothing was changed at `path`: whatever is mounted there is not this record's to unmount
                discard_tree(record)
            if isinstance(exc, HostDiskFull):
                raise
            _warn_once(f"{kind}:{path}", f"cannot put {path} on a capped {kind}: {why_failed(exc)}")
            return None
        with _LOCK:
            _ACTIVE[str(path)] = root
        return root

    def _mount_in(self) -> None:
        aside = sibling(self.path, "in")
        records.write_field(self.record, "state", "in")
        st = os.lstat(self.path)
        os.rename(self.path, aside)
        self._set_aside = True
        os.mkdir(self.path, 0o700)
        if self.kind == EXT4:
            image = self.record / "image.ext4"
            allocate(image, self.cap_mb << 20, what=f"the capped filesystem of {self.path}")
            inodes = min(MAX_INODES, max(1024, (self.cap_mb << 20) // 16384))
            # nodiscard: mkfs would otherwise punch the allocated blocks back out of the image file
            run_tool("mkfs.ext4", "-q", "-F", "-m", "0", "-N", str(inodes), "-O", "^has_journal", "-E", "nodiscard",
                     str(image))  # fmt: skip
            run_tool("mount", "-o", "loop,nosuid,nodev", str(image), str(self.path))
            os.rmdir(self.path / "lost+found")
        else:
            options = f"size={self.cap_mb}m,nr_inodes={MAX_INODES},mode=0700,nosuid,nodev"
            run_tool("mount", "-t", "tmpfs", "-o", options, records.tmpfs_source(self.record), str(self.path))
        self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        run_tool(*COPY_TREE, f"{aside}/.", f"{self.path}/")
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

    def lost(self) -> str | None:
        """Why the filesystem is no longer at the root's path (unmounted or detached under its
        users: what they wrote since is not in the tree), or None while it is there."""
        if self._fd is None:
            return None
        try:
            here = os.stat(self.path).st_dev
        except OSError:
            here = None
        if here == os.fstat(self._fd).st_dev:
            return None
        return f"the capped filesystem of {self.path} was unmounted while in use (what was written there is lost)"

    def _follow_a_move(self) -> None:
        """Where a folder above the root was renamed meanwhile (a scratch tree set aside for removal
        while a stopped run's sandbox still used it), release the root where it is now: by its
        recorded path, the mount would be left behind.

        Only a place where this root's own filesystem is mounted counts (`quota_records.mounted_at`):
        the descriptor of a filesystem detached meanwhile (`umount -l`) reads as "/", which is a mount
        point too, and must never become the origin that recovery replaces."""
        try:
            now = os.readlink(f"/proc/self/fd/{self._fd}") if self._fd is not None else str(self.path)
        except OSError:
            return
        if now != str(self.path) and records.origin_refusal(now) is None and Path(now) in records.mounted_at(
            self.record
        ):
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
            with _MOUNTING:
                self.check_written()
                lost = self.lost()
                if lost is not None:
                    log.warning("%s", lost)
                self._follow_a_move()
                self._close()  # before the unmount: a held descriptor keeps the filesystem busy
                recover_record(self.record)
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
        with _MOUNTING:  # a sandbox built meanwhile shares the root this one mounts, never mounts it again
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


def lost_roots(roots: list[CappedRoot]) -> list[str]:
    """Why each of `roots` whose filesystem was unmounted under its users is lost (`CappedRoot.lost`)."""
    return [why for why in (root.lost() for root in roots) if why is not None]


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
            log.warning("cannot release the capped root %s: %s", root.path, why_failed(exc))


def is_capped(path: Path) -> bool:
    """Whether `path` is, in this process, the root of a capped filesystem twin mounted."""
    with _LOCK:
        return str(path) in _ACTIVE


def unavailable(kind: str) -> str | None:
    """Why a capped filesystem of `kind` cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "twin does not run as root"
    needed = ["mount", "umount", "cp"] + (["mkfs.ext4"] if kind == EXT4 else [])
    missing = [tool for tool in needed if shutil.which(tool, path=TOOLS_PATH) is None]
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


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message)
