"""Choosing a sandbox implementation by name.

`SANDBOXES` maps each name to the class that builds it over a boundary; `auto`
picks bubblewrap, never `none`. The `docker` implementation imports the optional
`docker` package only when one is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from ground.boundary import Boundary
from ground.sandbox import Sandbox, SandboxError
from ground.sandboxes.bwrap import BwrapSandbox, bwrap_path
from ground.sandboxes.docker import DockerSandbox
from ground.sandboxes.none import UnsandboxedProcess

SANDBOXES: dict[str, Callable[[Boundary], Sandbox]] = {
    "bwrap": BwrapSandbox,
    "docker": DockerSandbox,
    "none": UnsandboxedProcess,
}
"""Sandbox kinds by name (`--sandbox NAME`)."""

KNOWN = ("auto", *SANDBOXES)


def available_sandboxes() -> list[str]:
    """Sandbox kinds usable on this machine (`none` always; `docker` when its SDK is installed)."""
    kinds = []
    if bwrap_path() is not None:
        kinds.append("bwrap")
    if importlib.util.find_spec("docker") is not None:
        kinds.append("docker")
    kinds.append("none")
    return kinds


def make_sandbox(kind: str, boundary: Boundary) -> Sandbox:
    """Build the sandbox `kind` for `boundary`.

    Args:
        kind: "bwrap", "docker", "none" (explicitly unsafe) or "auto" (bwrap, never none).

    Raises:
        SandboxError: unknown kind, or the chosen kind cannot run here.
    """
    if kind == "auto":
        if bwrap_path() is None:
            raise SandboxError(
                "no sandbox available: install bubblewrap (bwrap), "
                "or pass --sandbox none explicitly to run without isolation"
            )
        kind = "bwrap"
    if kind not in SANDBOXES:
        raise SandboxError(f"unknown sandbox {kind!r}; known: {', '.join(KNOWN)}")
    return SANDBOXES[kind](boundary)
