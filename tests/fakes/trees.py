"""Hostile trees an agent can build: chains deeper than any path or recursion limit."""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from ground.agent_tree import remove_tree

_CREATED: list[Path] = []


def _remove_created() -> None:
    # pytest removes old temporary directories with a recursive rmtree, which a chain
    # this deep breaks; take them down first (atexit runs this before pytest's clean-up).
    for top in _CREATED:
        try:
            remove_tree(top)
        except OSError:
            pass


atexit.register(_remove_created)


def deep_chain(root: Path, depth: int, name: str = "x") -> None:
    """Create `root/x/x/.../x`, `depth` levels, without ever forming the whole path."""
    _CREATED.append(Path(root) / name)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write("import torch\n")
    finally:
        os.close(fd)
