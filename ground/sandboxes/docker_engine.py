"""The Docker engine as every docker-side part of twin reaches it: the client and the base image.

`client()` connects (or says in one line what is missing), `ensure_base_image` builds
`twin-base:local` once with `docker import` from an empty root filesystem (no registry
is needed), and `reap_containers` removes the containers twin labelled, also those a
killed harness left behind. The docker sandbox (`docker.py`) and the task images
(`task_image.py`) both build on this module; neither imports the other for it.
"""

from __future__ import annotations

import io
import tarfile

from ground.sandbox import SandboxError

LABEL = "twin.sandbox"
DEFAULT_IMAGE = "twin-base:local"
_BASE_DIRS = ("app", "assets", "dev", "etc", "logs", "proc", "run", "source", "sys", "tests", "tmp")


def client():
    """A connected Docker client, or SandboxError saying what is missing."""
    try:
        import docker
    except ImportError:
        raise SandboxError("sandbox 'docker' needs the docker package: pip install 'twin-harness[docker]'") from None
    try:
        connected = docker.from_env()
        connected.ping()
    except Exception as exc:  # the SDK raises several unrelated types for "no engine"
        raise SandboxError(
            f"no Docker engine reachable ({exc.__class__.__name__}): start Docker or use --sandbox bwrap"
        ) from None
    return connected


def ensure_base_image(engine) -> str:
    """Build `twin-base:local` (an empty root with mount points) with `docker import` if missing.

    Raises:
        SandboxError: the engine refused the import.
    """
    try:
        engine.images.get(DEFAULT_IMAGE)
        return DEFAULT_IMAGE
    except Exception:  # docker.errors.ImageNotFound, without importing the SDK's errors here
        pass
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in _BASE_DIRS:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
    repository, tag = DEFAULT_IMAGE.split(":")
    try:
        engine.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)
    except Exception as exc:
        raise SandboxError(f"cannot build the local image {DEFAULT_IMAGE}: {exc}") from None
    return DEFAULT_IMAGE


def reap_containers(engine=None, *, boundary: str | None = None, instance: str | None = None) -> int:
    """Remove containers labelled by twin (all, one boundary's, or one sandbox's); returns how many."""
    engine = engine or client()
    label = LABEL
    if instance is not None:
        label = f"{LABEL}.instance={instance}"
    elif boundary is not None:
        label = f"{LABEL}.boundary={boundary}"
    removed = 0
    for container in engine.containers.list(all=True, filters={"label": label}):
        removed += remove_container(container)
    return removed


def remove_container(container) -> int:
    """Remove a container; one already gone or being removed counts as removed by someone else (0)."""
    try:
        container.remove(force=True)
        return 1
    except Exception:  # docker.errors.NotFound / APIError 409 "removal already in progress"
        return 0
