"""A root that lives under /tmp on the host (a venv or checkout there) stays visible inside.

The sandbox gives every command a private /tmp; it must not cover the roots it was asked to mount.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ground.boundary import Boundary, Mount
from ground.isolation import python_mounts
from ground.sandboxes.registry import make_sandbox
from tests.conftest import requires_bwrap


@requires_bwrap
def test_a_root_under_tmp_is_bound_on_top_of_the_private_tmp():
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        root = Path(tmp) / "checkout"
        root.mkdir()
        (root / "marker.txt").write_text("visible")
        boundary = Boundary(name="t", mounts=[*python_mounts(), Mount(host=root, inside=str(root))])
        box = make_sandbox("bwrap", boundary)
        try:
            seen = box.exec(["cat", str(root / "marker.txt")])
            private = box.exec(["bash", "-c", "touch /tmp/own && ls /tmp"])
        finally:
            box.close()
    assert seen.ok and seen.stdout == "visible"
    assert private.ok and "own" in private.stdout.split()
