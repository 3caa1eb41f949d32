"""What every sandbox does alike: its environment, its file operations, and letting go of what it holds.

`BoundarySandbox` is the small base of the `bwrap`, `docker` and `none` sandboxes: file
operations go through the boundary's checks on the host (`read_file`, `write_file`),
`close` releases what the sandbox holds once (each kind says what in `_release`, and
the roots it presents are released even when that fails), and a closed sandbox runs
nothing. `PresentedRoots` is what the isolating kinds hold besides: writable roots on
size-capped filesystems where twin can mount them (`quota.py`) and every root shown
from a neutral slot (`presentation.py`). `sandbox_env` is the whole environment a
command sees.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Self

from ground.boundary import SECRET_NAME, Boundary
from ground.sandbox import SandboxError
from ground.sandboxes.presentation import Presenter
from ground.sandboxes.process import SYSTEM_PATH
from ground.sandboxes.quota import cap_writable_roots, lost_roots, release_all
from ground.untrusted_io import write_atomic


class PresentedRoots:
    """A boundary's roots as an isolating sandbox binds them, held from its start to its close."""

    def __init__(self, boundary: Boundary) -> None:
        """Cap the writable roots, then give every root its neutral slot; nothing stays held if either fails."""
        self.capped = cap_writable_roots(boundary)  # before the presenter: a capped root needs no slot
        try:
            self.presenter = Presenter(boundary)
        except BaseException:
            release_all(self.capped)
            raise

    def release(self) -> None:
        """Move every root back out of its slot, then unmount the capped filesystems (also if the first fails)."""
        try:
            self.presenter.close()
        finally:
            release_all(self.capped)


class BoundarySandbox:
    """The part of the `Sandbox` protocol that every kind shares; a kind adds `exec` and `_release`.

    A path the boundary refuses raises `BoundaryViolation` (and is audited); a command
    on a closed sandbox raises `SandboxError`.
    """

    def __init__(self, boundary: Boundary, roots: PresentedRoots | None = None) -> None:
        self.boundary = boundary
        self._roots = roots
        self._closed = False

    def read_file(self, path: str) -> bytes:
        """Read a file inside the sandbox (checked against the boundary first; read on the host)."""
        return read_checked(self.boundary, path)

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file inside the sandbox (only under the writable root; checked against the boundary first)."""
        write_checked(self.boundary, path, data)

    def lost_roots(self) -> list[str]:
        """Why each capped writable root was lost under this sandbox (`quota.CappedRoot.lost`); [] if none.

        A command runs with no capability to unmount: a lost root is twin's own failure, and
        what ran meanwhile is no evidence about the code it ran.
        """
        return lost_roots(self._roots.capped) if self._roots is not None else []

    def close(self) -> None:
        """Release what the sandbox holds, once: its own (`_release`), then its presented roots, whatever happens."""
        if self._closed:
            return
        self._closed = True
        try:
            self._release()
        finally:
            if self._roots is not None:
                self._roots.release()

    def _release(self) -> None:
        """Release what this kind of sandbox holds besides its presented roots (nothing by default)."""

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.boundary.name} is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def sandbox_env(boundary: Boundary, extra: dict[str, str] | None) -> dict[str, str]:
    """The whole environment inside: fixed defaults, allowed names, the boundary's and the call's.

    Raises:
        BoundaryViolation: `extra` names a variable that looks like a credential.
    """
    env = {
        "PATH": f"{Path(sys.prefix) / 'bin'}:{SYSTEM_PATH}",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    env.update({name: os.environ[name] for name in boundary.env_allow if name in os.environ})
    env.update(boundary.env)
    for name, value in (extra or {}).items():
        if SECRET_NAME.search(name):
            boundary.refuse("set environment", name, "looks like a credential")
        env[name] = value
    return env


def read_checked(boundary: Boundary, path: str) -> bytes:
    """Read the host file behind an inside path, after the boundary's checks.

    Raises:
        BoundaryViolation: the path is refused (and audited).
        FileNotFoundError, IsADirectoryError: as for a plain open.
    """
    host = boundary.check_read(path)
    fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def write_checked(boundary: Boundary, path: str, data: bytes | str) -> None:
    """Write the host file behind an inside path atomically, after the boundary's checks.

    Raises:
        BoundaryViolation: the path is not under the writable root, or is refused.
        IsADirectoryError: the path is a directory.
    """
    host = boundary.check_write(path)
    if host.is_dir():
        raise IsADirectoryError(f"{path} is a directory")
    parent = host.parent
    for ancestor in [parent, *parent.parents]:
        if ancestor.exists():
            break
        if ancestor.is_symlink():
            boundary.refuse("write", path, "a dangling symbolic link in its parents")
    parent.mkdir(parents=True, exist_ok=True)
    # a random temporary name created exclusively: nothing planted at a name twin would use is opened
    write_atomic(parent, host.name, data.encode() if isinstance(data, str) else data)
