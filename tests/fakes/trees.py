"""Hostile trees an agent can build: chains deeper than any path or recursion limit."""

from __future__ import annotations

import os
from pathlib import Path


def deep_chain(root: Path, depth: int, name: str = "x") -> None:
    """Create `root/x/x/.../x`, `depth` levels, without ever forming the whole path."""
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
