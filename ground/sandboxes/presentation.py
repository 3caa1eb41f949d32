"""Neutral mount sources: what a sandbox can learn of host paths from `/proc/self/mountinfo`.

A bind mount's line in mountinfo names its source as a path within its filesystem,
whatever path it was bound through: binding `runs/<id>/workspace/candidate` shows that
path inside. So every root that is not already visible at its own path (the
interpreter, the system roots) and not already under twin's cache or staging
directories is presented to the sandbox from a slot, `<stage_root>/p…/<n>`:

- a writable root is moved into its slot for the command (a rename: same filesystem,
  no copy) and moved back after it; a symbolic link holds its place meanwhile, so the
  host's paths keep working, and roots a killed harness left in slots are moved back by
  the next sandbox (`recover_slots`);
- a read-only root is a snapshot in its slot while commands run: hard links to its files
  (copies where the filesystem differs, within caps), rebuilt whenever the tree changed,
  without its hidden paths, and removed when no command runs (so no extra link outlives a
  command: a file with several links is one the harness will not write or hand over).

A root that cannot be presented when the sandbox is built (a writable root on another
filesystem than the staging directory, or a mount point; a read-only root already over the
snapshot caps) is bound as it is. A read-only root that grows over the caps afterwards (only
an agent's tree changes during a run: the candidate, read-only to the Verifier or to a
probe side) refuses each command until it shrinks again: `enter` raises `RootOverCaps`, and
the sandbox returns it as the command's failed result (`RootOverCaps.result`), so the
agent's own tree fails its command, never the sandbox or the trial.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from ground.agent_tree import discard_tree
from ground.boundary import Boundary, Mount
from ground.errors import TwinError
from ground.host_dirs import IsolationError, is_ours, read_ours
from ground.isolation import cache_root, stage_root
from ground.sandbox import ExecResult, SandboxError
from ground.sandboxes.disk import DISK_RETURNCODE
from ground.sandboxes.owner import own_tag, owner_alive
from ground.sandboxes.quota import is_capped
from ground.untrusted_io import write_atomic
from ground.views import tree_entries

MAX_SNAPSHOT_ENTRIES = 50_000
MAX_SNAPSHOT_COPY_BYTES = 256 << 20
OVER_CAPS = "snapshot"
"""The kind that `ExecResult.exceeded` starts with when a read-only root over the caps refused a command."""
_OWNER = "owner"


class RootOverCaps(TwinError):
    """A read-only root grew over the snapshot caps: the command is refused, the sandbox is fine.

    Attributes:
        exceeded: `snapshot: <root inside> holds more than … entries` (the root by its path inside).
    """

    def __init__(self, inside: str, why: str) -> None:
        self.exceeded = f"{OVER_CAPS}: {inside} {why}"
        self.line = f"twin: the command did not run: the read-only root {inside} {why}, over the snapshot cap"
        super().__init__(self.exceeded)

    def result(self) -> ExecResult:
        """The refused command as a failed result: it did not run, and stderr says why in one line."""
        return ExecResult(
            returncode=DISK_RETURNCODE,
            stderr=f"{self.line} (remove files there to bring it under)\n",
            exceeded=self.exceeded,
        )


def refused_over_caps(result: ExecResult) -> str | None:
    """Why a command did not run because a read-only root of its sandbox is over the caps, or None."""
    exceeded = result.exceeded or ""
    return exceeded if exceeded.startswith(f"{OVER_CAPS}: ") else None


class _Slot:
    def __init__(self, origin: Path, path: Path, writable: bool, hidden: list[Path], inside: str) -> None:
        self.origin, self.path, self.writable, self.hidden = origin, path, writable, hidden
        self.inside = inside
        self.signature: tuple | None = None
        self.moved = False  # a writable root is in its slot


class Presenter:
    """The slots of one sandbox: `boundary()` is the boundary as bound, `presented()` a command's span."""

    def __init__(self, boundary: Boundary) -> None:
        self._source = boundary
        self._dir: Path | None = None
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._running = 0
        self._stale: list[Path] = []  # replaced snapshots a running command may still read
        mounts = [self._present(mount) for mount in boundary.mounts]
        # (hidden path, where it lies as bound): None where a snapshot left it out
        self.hidden_pairs = [(path, self._moved(path)) for path in boundary.hidden]
        hidden = [moved for _path, moved in self.hidden_pairs if moved is not None]
        self._boundary = boundary.model_copy(update={"mounts": mounts, "hidden": hidden})

    def boundary(self) -> Boundary:
        """The boundary with each presented root's source replaced by its slot."""
        return self._boundary

    def _present(self, mount: Mount) -> Mount:
        _refuse_dead_slot(mount.host)
        if not _needs_slot(mount):
            return mount
        host = mount.host
        if mount.writable and not _movable(host):
            return mount
        if not mount.writable and not host.is_dir():
            return mount
        if self._dir is None:
            self._dir = _slot_dir()
        path = self._dir / str(len(self._slots))
        path.mkdir(mode=0o755)
        hidden = [h for h in self._source.hidden if h == host or host in h.parents]
        slot = _Slot(host, path, mount.writable, hidden, mount.inside)
        if mount.writable:
            (self._dir / f"{len(self._slots)}.origin").write_text(str(host))
        elif _signature(slot) is None:  # over the caps: bound as it is
            path.rmdir()
            return mount
        self._slots.append(slot)
        return mount.model_copy(update={"host": path})

    def _moved(self, hidden: Path) -> Path | None:
        for slot in self._slots:
            if hidden == slot.origin or slot.origin in hidden.parents:
                return slot.path / hidden.relative_to(slot.origin) if slot.writable else None
        return hidden

    def enter(self) -> None:
        """Before a command: writable roots into their slots, snapshots brought up to date.

        Commands of one sandbox may run at once: the first in moves a writable root, the
        last out moves it back, and a replaced snapshot is removed once none runs.

        Raises:
            RootOverCaps: a read-only root grew over the snapshot caps (nothing was entered).
            SandboxError: a root cannot be presented.
        """
        with self._lock:
            for slot in self._slots:
                if slot.writable:
                    continue
                over = _snapshot(slot, self._stale)
                if over is not None:
                    raise RootOverCaps(slot.inside, over)
            if self._running == 0:
                try:
                    for slot in self._slots:
                        if slot.writable:
                            _move_in(slot)
                except OSError as exc:
                    self._settle()
                    why = f"cannot present a writable root of {self._source.name}: {exc.strerror}"
                    raise SandboxError(why) from None
            self._running += 1

    def leave(self) -> None:
        """After a command: the last one out moves each writable root back."""
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self._settle()

    def _settle(self) -> None:
        """No command runs: writable roots go back, snapshots go (their links must not outlive it)."""
        for slot in self._slots:
            if slot.writable and slot.moved:
                _move_back(slot.path, slot.origin)
                slot.moved = False
            elif not slot.writable and slot.signature is not None:
                self._stale.append(slot.path.with_name(slot.path.name + ".done"))
                os.rename(slot.path, self._stale[-1])
                os.mkdir(slot.path, 0o755)
                slot.signature = None
        for old in self._stale:
            discard_tree(old)
        self._stale.clear()

    def close(self) -> None:
        """Move every root back and remove the slots (a slot still holding a root is kept)."""
        with self._lock:
            self._running = 0
            self._settle()
            if self._dir is not None and not _holds_root(self._dir):
                discard_tree(self._dir)
            self._dir = None


def recover_presented() -> list[Path]:
    """Move back what killed processes left in slots; run before any boundary is built.

    A boundary resolves its roots: one built over a root a killed process left in its
    slot would name the slot, and would stop matching once the root is moved back.
    """
    try:
        return recover_slots(stage_root())
    except (OSError, IsolationError):  # none can be made here, or another user's: nothing of twin's to move
        return []


def _refuse_dead_slot(host: Path) -> None:
    base = stage_root()
    if base not in host.parents:
        return
    folder = base / host.relative_to(base).parts[0]
    if folder.name.startswith("p") and not _owner_alive(folder):
        recover_slots(base)
        raise SandboxError(
            "a root of this boundary was left in a sandbox slot by a killed process; it has been"
            " moved back: build the boundary again (twin does this when a run opens)"
        )


def _needs_slot(mount: Mount) -> bool:
    host = mount.host
    if is_capped(host):
        return False  # the root of its own filesystem: mountinfo names it `/`, nothing of the host
    if str(host) == mount.inside or str(host) == os.path.realpath(mount.inside):
        return False  # visible at its own path already (`/usr`, `/bin` -> `/usr/bin`, the interpreter)
    for neutral in (cache_root(), stage_root()):
        if host == neutral or neutral in host.parents:
            return False
    return True


def _movable(host: Path) -> bool:
    """A directory (not a link, not a mount point) on the staging directory's filesystem."""
    try:
        st = os.lstat(host)
        parent = os.stat(host.parent)
        return (
            stat.S_ISDIR(st.st_mode)
            and st.st_dev == parent.st_dev
            and st.st_dev == os.stat(stage_root()).st_dev
        )
    except OSError:
        return False


def _slot_dir() -> Path:
    base = stage_root()
    recover_slots(base)
    path = Path(tempfile.mkdtemp(prefix="p", dir=base))
    os.chmod(path, 0o711)
    # whole or not at all: another twin reading an empty owner would take the slot for a dead one
    write_atomic(path, _OWNER, own_tag().encode())
    return path


def _move_in(slot: _Slot) -> None:
    os.rmdir(slot.path)  # the empty placeholder
    try:
        os.rename(slot.origin, slot.path)
    except OSError:
        os.mkdir(slot.path, 0o755)
        raise
    slot.moved = True
    os.symlink(slot.path, slot.origin)


def _move_back(path: Path, origin: Path) -> None:
    if os.path.islink(origin) and os.readlink(origin) == str(path):
        os.unlink(origin)
    if not os.path.lexists(origin) and os.path.isdir(path):
        os.rename(path, origin)
        os.mkdir(path, 0o755)


def recover_slots(base: Path) -> list[Path]:
    """Move back the writable roots that slots of dead processes still hold; remove those slots.

    Only slots twin made are acted on: a slot folder, its owner record and each `.origin`
    record must be this user's alone (`host_dirs.is_ours`, `read_ours`); anything else in
    the stage is left as it is.
    """
    recovered: list[Path] = []
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith("p") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return recovered
    for entry in entries:
        folder = Path(entry.path)
        if not is_ours(folder) or not read_ours(folder / _OWNER) or _owner_alive(folder):
            continue
        for record in folder.glob("*.origin"):
            text = read_ours(record)
            if not text.startswith("/"):
                continue
            origin = Path(text)
            path = folder / record.name.removesuffix(".origin")
            ours = os.path.islink(origin) and os.readlink(origin) == str(path)
            if ours or (not os.path.lexists(origin) and _non_empty(path)):
                try:
                    _move_back(path, origin)
                    recovered.append(origin)
                except OSError:
                    continue
        if not _holds_root(folder):
            discard_tree(folder)
    return recovered


def _owner_alive(folder: Path) -> bool:
    return owner_alive(read_ours(folder / _OWNER))


def _holds_root(folder: Path) -> bool:
    """Whether a writable root still lies in one of the folder's slots (never remove it then)."""
    return any(_non_empty(folder / r.name.removesuffix(".origin")) for r in folder.glob("*.origin"))


def _non_empty(path: Path) -> bool:
    try:
        return path.is_dir() and any(path.iterdir())
    except OSError:
        return True


# ---- read-only snapshots ---------------------------------------------------------------------
def _signature(slot: _Slot) -> tuple | None:
    """What the snapshot depends on: every entry's path, type, size, mtime and inode (None: over caps)."""
    entries = tree_entries(slot.origin, slot.hidden, MAX_SNAPSHOT_ENTRIES)
    if entries is None:
        return None
    return tuple((str(slot.origin / rel), st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino) for rel, st in entries)


def _snapshot(slot: _Slot, stale: list[Path]) -> str | None:
    """Bring the slot's snapshot up to date; where the tree is over a cap, say which.

    Raises:
        SandboxError: the snapshot cannot be written (twin's side: disk, permissions).
    """
    signature = _signature(slot)
    if signature is None:
        return f"holds more than {MAX_SNAPSHOT_ENTRIES} entries"
    if signature == slot.signature:
        return None
    fresh = Path(tempfile.mkdtemp(prefix=slot.path.name + ".", dir=slot.path.parent))
    try:
        os.chmod(fresh, stat.S_IMODE(os.stat(slot.origin).st_mode))
        copied = 0
        for path, mode, size, _mtime, _ino in signature:
            target = fresh / Path(path).relative_to(slot.origin)
            if stat.S_ISDIR(mode):
                target.mkdir()
                os.chmod(target, stat.S_IMODE(mode))
            elif stat.S_ISLNK(mode):
                os.symlink(os.readlink(path), target)
            elif stat.S_ISREG(mode):
                try:
                    os.link(path, target, follow_symlinks=False)
                except OSError:
                    copied += size
                    if copied > MAX_SNAPSHOT_COPY_BYTES:
                        discard_tree(fresh)
                        return f"needs more than {MAX_SNAPSHOT_COPY_BYTES >> 20} MiB of copies"
                    shutil.copy2(path, target, follow_symlinks=False)
            # sockets, fifos and devices are left out: a read-only root has no use for them
    except OSError as exc:
        discard_tree(fresh)
        raise SandboxError(f"cannot snapshot the read-only root {slot.inside}: {exc.strerror or exc}") from None
    old = Path(tempfile.mkdtemp(prefix=slot.path.name + ".old.", dir=slot.path.parent))
    os.rename(slot.path, old / "tree")
    os.rename(fresh, slot.path)
    stale.append(old)
    slot.signature = signature
    return None
