"""The records of capped filesystems (`quota`): where they lie, written whole, read only when twin's own.

Each capped root has a folder of records under `stage_root()/quota/`: its owner's process
tag, its origin, its kind, the step reached, and (ext4) its image. The next twin acts on
them as root (unmounts, renames, mounts the image), so a record counts only where twin's
user alone could have written it: the folder of records is that user's alone (0700), checked
at each use without following a link (`host_dirs.trusted_subdir`), and so is every record
folder and field read (`host_dirs.is_ours`, `read_ours`); anything else reads as empty.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from ground.host_dirs import read_ours, trusted_subdir
from ground.isolation import stage_root
from ground.sandboxes.owner import owner_alive
from ground.untrusted_io import write_atomic

EXT4 = "ext4"
"""The kind of a root that outlives its sandbox (the candidate): an ext4 image, loop-mounted."""
TMPFS = "tmpfs"
"""The kind of twin's own scratch under `stage_root()`: a tmpfs for the life of its sandbox."""

DRAFT = ".draft-"
"""A record being written: never read as one (it is renamed to `q…` once whole)."""


def records_dir() -> Path:
    """The records' folder: this user's alone (0700), checked at each use, never a link followed.

    Raises:
        IsolationError: the stage or the folder is another user's, a link, or open to others.
    """
    return trusted_subdir(stage_root(), "quota")


def write_field(record: Path, name: str, text: str) -> None:
    """Write one field of `record` whole (a reader sees the old text or the new)."""
    write_atomic(record, name, text.encode())


def read_field(record: Path, name: str) -> str:
    """One field of `record`; "" where it is missing or not this user's alone."""
    return read_ours(record / name)


def age_s(path: Path) -> float:
    """Seconds since `path` last changed (0 where it is gone)."""
    try:
        return time.time() - os.lstat(path).st_mtime
    except OSError:
        return 0.0


def owner_running(record: Path) -> bool:
    """Whether the process that wrote `record` still runs."""
    return owner_alive(read_field(record, "owner"))


def origin_refusal(origin: str) -> str | None:
    """Why `origin` is no place twin put a capped root, or None where it may be one.

    A root is a named directory given by its absolute, normal path; never the filesystem's
    root, nor one of the folders twin sets a root's tree aside in (`.NAME.twin-STEP`). A
    record that names anything else was not written by a mount of twin's (or was garbled
    since): recovery, which unmounts and replaces what is at the origin, must not act on it.
    """
    if not os.path.isabs(origin):
        return "not an absolute path"
    if os.path.normpath(origin) != origin or origin.startswith("//"):
        return "not a normal path"
    name = os.path.basename(origin)
    if not name:
        return "the root of the filesystem"
    if name.startswith(".") and ".twin-" in name:
        return "a folder twin sets a tree aside in"
    return None


def tmpfs_source(record: Path) -> str:
    """The source name of `record`'s tmpfs in the mount table: how it is found wherever it was moved."""
    return f"twin-capped-{record.name}"


def mounted_at(record: Path) -> list[Path]:
    """Where `record`'s filesystem is mounted now, whatever its folder was renamed to since.

    Its tmpfs by its source name (`tmpfs_source`), its ext4 image by the loop device whose
    backing file it is. For a root whose recorded folder is gone (a scratch tree set aside
    for removal while still mounted): unmounted where it is, it is not left behind.
    """
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    image = str(record / "image.ext4")
    found = []
    for line in lines:
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        point, source = fields[4], fields[fields.index("-", 6) + 2]
        if source.startswith("/dev/loop"):
            try:
                source = Path(f"/sys/block/{source[5:]}/loop/backing_file").read_text().strip()
            except OSError:
                continue
            source = "image" if source == image else source
        if source in (tmpfs_source(record), "image"):
            found.append(Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)))
    return found
