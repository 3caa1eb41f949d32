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
import time
from pathlib import Path

from ground.host_dirs import read_ours, trusted_subdir
from ground.isolation import stage_root
from ground.sandboxes.owner import owner_alive
from ground.untrusted_io import write_atomic

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
