"""Where twin keeps its own files on the host: the cache and the stage directory.

Both must be reachable by the sandbox uid (it mounts what lies there), so neither may
lie where that uid cannot traverse (root's home, a `mkdtemp` directory).
"""

from __future__ import annotations

import os
from pathlib import Path

from ground.errors import TwinError


class IsolationError(TwinError):
    """A sandbox's fixed parts (the `/etc` snapshot, the cache, the stage) could not be prepared."""


def cache_root() -> Path:
    """Where twin keeps derived files sandboxes mount (`$TWIN_CACHE_DIR`, else a per-user cache).

    As root the default is `/var/cache/twin`: the sandbox uid must be able to reach what
    it mounts, and root's home is closed to it.
    """
    configured = os.environ.get("TWIN_CACHE_DIR")
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/var/cache/twin")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "twin"


STAGE_DIR = "/var/tmp/twin-stage"
"""The shared stage directory (`stage_root`), unless `$TWIN_STAGE_DIR` names another."""


def stage_root() -> Path:
    """A directory the sandbox uid can traverse (not list) for staged mount points.

    `$TWIN_STAGE_DIR`, else `/var/tmp/twin-stage`; where another user owns that one (root
    made it, this twin is not root), `/var/tmp/twin-stage-<uid>`: only an owner may change
    a directory's mode, and a directory someone else controls is no place for this user's
    scratch.
    """
    configured = os.environ.get("TWIN_STAGE_DIR")
    root = Path(configured or STAGE_DIR)
    root.mkdir(parents=True, exist_ok=True)
    if not configured and os.stat(root).st_uid != os.geteuid():
        root = root.with_name(f"{root.name}-{os.geteuid()}")
        root.mkdir(exist_ok=True)
        if os.stat(root).st_uid != os.geteuid():
            raise IsolationError(f"{root} belongs to another user: remove it, or set TWIN_STAGE_DIR")
    if os.stat(root).st_uid == os.geteuid():
        os.chmod(root, 0o711)
    return root
