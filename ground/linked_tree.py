"""A directory laid out as hard links to another's files: a second view of gigabytes that costs no copy.

Hiding a package from a sandbox needs a site-packages without it (a directory mounted over
it is still imported, as an empty namespace package). Copying the rest of a machine-learning
environment costs gigabytes and minutes per cache; hard links on the same filesystem cost a
directory tree and one link per file (`cp -al`). The hidden package is physically absent from
the new tree all the same.

A hard link is the same file: it keeps the original's owner and mode (so the sandbox uid reads
what it could read in the environment itself), and nothing here changes a file's mode, which
would change the environment's own file. The new directories are twin's, and lose group and
other write. Nothing may write through the tree: it is only ever mounted read-only. Where no
link can be made (another filesystem; a file this user may not link, `fs.protected_hardlinks`),
the tree is copied as before (`cp -a --reflink=auto`), every file then losing group and other
write.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

LINKED, COPIED = "linked", "copied"


def lay_out(entries: list[Path], staging: Path) -> str:
    """Lay `entries` (files, links and directories of one directory) out in the empty `staging`.

    Returns:
        `LINKED` (hard links, new directories) or `COPIED` (links could not be made).

    Raises:
        OSError, subprocess.CalledProcessError: neither could be made (a full disk); `staging` is
            left for the caller to remove.
    """
    if entries and _same_filesystem(entries[0], staging):
        done = subprocess.run(["cp", "-al", "--", *map(str, entries), str(staging)], capture_output=True)
        if done.returncode == 0:
            subprocess.run(["find", str(staging), "-type", "d", "-exec", "chmod", "go-w", "{}", "+"],
                           check=True, capture_output=True)  # fmt: skip
            staging.chmod(0o755)
            return LINKED
        _empty(staging)  # a link refused (protected_hardlinks): copy it all instead
    if entries:
        subprocess.run(["cp", "-a", "--no-preserve=links", "--reflink=auto", "--", *map(str, entries), str(staging)],
                       check=True, capture_output=True)  # fmt: skip
    subprocess.run(["chmod", "-R", "go-w", "--", str(staging)], check=True, capture_output=True)
    staging.chmod(0o755)
    return COPIED


def _same_filesystem(a: Path, b: Path) -> bool:
    try:
        return os.lstat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _empty(directory: Path) -> None:
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def link_or_copy(source: str, dest: str) -> str:
    """`shutil.copytree`'s `copy_function`: a hard link to `source`, a copy where none can be made."""
    try:
        os.link(source, dest, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, dest, follow_symlinks=False)
    return dest
