"""Choosing a sandbox implementation by name.

Implementations are imported only when chosen (the `docker` one needs the
optional `docker` package).
"""

from __future__ import annotations

import importlib.util

from harness.ground.boundary import Boundary
from harness.ground.sandbox import Sandbox, SandboxError
from harness.sandbox.bwrap import bwrap_path

KNOWN = ("auto", "bwrap", "docker", "none")


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
    if kind == "bwrap":
        from harness.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(boundary)
    if kind == "docker":
        from harness.sandbox.docker import DockerSandbox

        return DockerSandbox(boundary)
    if kind == "none":
        from harness.sandbox.none import UnsandboxedProcess

        return UnsandboxedProcess(boundary)
    raise SandboxError(f"unknown sandbox {kind!r}; known: {', '.join(KNOWN)}")
