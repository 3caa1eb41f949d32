"""Images built from a published task's `environment/`, the base of its docker sandboxes.

`build_task_image` builds the task's `environment/Dockerfile` with `environment/` as the
whole build context. twin sends the context itself: nothing else of the task (its
`tests/`, `solution/`, `task.toml`) can reach the image; a symbolic link that leads out of
the context is left out, and a hard link to one of the task's hidden files refuses the
build. The build has no network (`network_mode="none"`: a `FROM` image must already be
here), a time limit, and a tag named by a digest of the context (`twin-task:<digest>`), so
an unchanged context is built once and reused. A last step takes the built files out again
without the paths the Dockerfile lays out (twin mounts those per boundary, so that a
candidate-side probe sees no original in the image either) and imports them as the task's
image, with the built image's environment variables less those that look like secrets and
nothing it would run of its own accord (no `ENTRYPOINT`, `CMD` or `HEALTHCHECK`).

The loaded task carries the image (`Task.image`, set by `task_model.loader`), every
boundary made for the task carries it on (`Boundary.image`), and the docker sandbox runs on it
instead of `twin-base:local`. twin still mounts its own
interpreter, system directories and the boundary's roots over the image, exactly as over
twin-base, so what a `RUN` left under those paths is covered by twin's own.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ground.boundary import SECRET_NAME
from ground.sandbox import SandboxError
from ground.sandboxes import docker_engine
from ground.sandboxes.docker_engine import ensure_base_image

REPOSITORY = "twin-task"
LABEL = "twin.task-image"
BUILD_TIMEOUT_S = 1800.0
# Bumped whenever the last step changes, so that an image built by an older step is not reused.
_LAST_STEP_VERSION = "2"
_REASON_CHARS = 300


class ImageBuildError(SandboxError):
    """The task's image could not be built (one line saying why)."""


def context_entries(context: Path, hidden: Sequence[Path]) -> list[tuple[str, Path]]:
    """What the build context sends: (name in the archive, host path), sorted.

    `.dockerignore` is applied as Docker applies it; a symbolic link whose target leaves
    the context is left out.

    Raises:
        ImageBuildError: a file of the context is a hard link to one of `hidden`'s files,
            or a hidden root lies inside the context.
    """
    from docker.utils.build import exclude_paths

    context = Path(os.path.realpath(context))
    hidden = [Path(os.path.realpath(h)) for h in hidden]
    for root in hidden:
        if root == context or context in root.parents:
            raise ImageBuildError(f"{root.name} lies inside the build context {context}")
    ignore = context / ".dockerignore"
    patterns = [p.strip() for p in ignore.read_text().splitlines()] if ignore.is_file() else []
    patterns = [p for p in patterns if p and not p.startswith("#")]
    entries: list[tuple[str, Path]] = []
    linked: list[tuple[str, os.stat_result]] = []
    for name in sorted(exclude_paths(str(context), patterns)):
        path = context / name
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if not (target == context or context in target.parents):
                continue
        else:
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                linked.append((name, st))
        entries.append((name, path))
    if linked:
        secret = _inodes_under(hidden)
        for name, st in linked:
            if (st.st_dev, st.st_ino) in secret:
                raise ImageBuildError(f"environment/{name} is a hard link to one of the task's hidden files")
    return entries


def context_digest(entries: Sequence[tuple[str, Path]], laid_out: Sequence[str] = ()) -> str:
    """A digest of the context's names, kinds, modes, link targets and contents (not their times).

    Each entry's header is a JSON line that states its content's length: no two contexts share it.
    """
    digest = hashlib.sha256(json.dumps(["twin-task-image", _LAST_STEP_VERSION, list(laid_out)]).encode() + b"\n")
    for name, path in entries:
        st = path.lstat()
        target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        digest.update(json.dumps([name, stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), size, target]).encode())
        digest.update(b"\n")
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def write_context(entries: Sequence[tuple[str, Path]], fileobj) -> None:
    """Write the context as a tar archive (the body of the build request)."""
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for name, path in entries:
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)


def build_task_image(
    context: Path,
    *,
    hidden: Sequence[Path],
    laid_out: Sequence[str] = (),
    timeout_s: float = BUILD_TIMEOUT_S,
    client=None,
) -> str:
    """Build (or reuse) the image of `context`'s Dockerfile; returns its tag.

    Args:
        context: the task's `environment/` (its Dockerfile and everything it copies).
        hidden: the task's hidden files (tests, solution, task.toml): never sent.
        laid_out: the paths inside that the Dockerfile lays out: left out of the image.
        timeout_s: the build's time limit (the build and the last step together).

    Raises:
        ImageBuildError: no engine, a FROM image that is not here, a failing step, the
            time limit, or a context that would carry a hidden file (one line each).
    """
    client = client or docker_engine.client()
    laid_out = sorted({os.path.normpath(p) for p in laid_out} - {"/"})
    try:
        entries = context_entries(context, hidden)
        tag = f"{REPOSITORY}:{context_digest(entries, laid_out)[:16]}"
    except OSError as exc:
        raise ImageBuildError(f"cannot read the build context: {exc}") from None
    try:
        client.images.get(tag)
        return tag
    except Exception:  # docker.errors.ImageNotFound: build it
        pass
    ensure_base_image(client)  # a task may build FROM twin-base:local
    deadline = time.monotonic() + timeout_s
    try:
        with tempfile.TemporaryFile() as body:
            write_context(entries, body)
            body.seek(0)
            built = _build(client, body, tag=None, deadline=deadline, timeout_s=timeout_s)
        _import_without(client, built, laid_out, tag=tag, deadline=deadline)
    except ImageBuildError:
        raise
    except Exception as exc:  # an unreadable file, the engine's APIError, a dropped connection
        late = time.monotonic() > deadline
        raise ImageBuildError(f"the build took longer than {timeout_s:g} s" if late else one_line(str(exc))) from None
    return tag


def _import_without(client, built: str, laid_out: Sequence[str], *, tag: str, deadline: float) -> None:
    """Import the files of image `built` as `tag`, less `laid_out`, with its non-secret ENV only."""
    env = client.images.get(built).attrs.get("Config", {}).get("Env") or []
    changes = [f"ENV {k}={json.dumps(v)}" for k, _, v in (e.partition("=") for e in env) if not SECRET_NAME.search(k)]
    container = client.containers.create(built, command=["true"], labels={LABEL: "1"})  # never started
    try:
        with tempfile.TemporaryFile() as kept:
            exported = io.BufferedReader(_Chunks(client.api.export(container.id), deadline))
            with tarfile.open(fileobj=exported, mode="r|") as files, tarfile.open(fileobj=kept, mode="w") as out:
                for member in files:
                    if _under(member.name, laid_out) or (member.islnk() and _under(member.linkname, laid_out)):
                        continue
                    out.addfile(member, files.extractfile(member) if member.isreg() else None)
            kept.seek(0)
            repository, name = tag.split(":")
            client.api.import_image(src=kept, repository=repository, tag=name, changes=changes)
    finally:
        container.remove(force=True)
    client.images.get(tag)  # the import is there, or the engine's error
    try:
        client.images.remove(built)  # the build's own image: only its files were wanted
    except Exception:  # still used by a concurrent build of the same context: it stays
        pass


def _under(name: str, roots: Sequence[str]) -> bool:
    inside = "/" + os.path.normpath(name).lstrip("/")
    return any(inside == root or inside.startswith(root.rstrip("/") + "/") for root in roots)


class _Chunks(io.RawIOBase):
    """A readable file over the chunks of an exported file system, that stops at the deadline."""

    def __init__(self, chunks, deadline: float) -> None:
        self._chunks, self._rest, self._deadline = iter(chunks), b"", deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._rest:
            if time.monotonic() > self._deadline:
                raise ImageBuildError("the build took longer than its time limit")
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._rest = chunk
        size = min(len(buffer), len(self._rest))
        buffer[:size], self._rest = self._rest[:size], self._rest[size:]
        return size


def _build(client, body, *, tag: str | None, deadline: float, timeout_s: float) -> str:
    """One build request without network; returns the image id, or ImageBuildError naming the failed step."""
    image_id, step = None, ""
    try:
        stream = client.api.build(
            fileobj=body,
            custom_context=True,
            tag=tag,
            labels={LABEL: "1"},
            network_mode="none",
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            use_config_proxy=False,
            timeout=max(1.0, deadline - time.monotonic()),
        )
        for chunk in stream:
            if chunk.get("error"):
                raise ImageBuildError(one_line(f"{step}{chunk['error']}"))
            text = str(chunk.get("stream", ""))
            if text.startswith("Step "):  # "Step 1/2 : FROM python:3.11-slim"
                step = f"{text.split(' : ', 1)[-1].strip()}: "
            aux = chunk.get("aux")
            if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
                image_id = aux["ID"]
            found = re.match(r"Successfully built ([0-9a-f]+)", text)
            if found and image_id is None:
                image_id = found.group(1)
            if time.monotonic() > deadline:
                raise ImageBuildError(f"the build took longer than {timeout_s:g} s")
    except ImageBuildError:
        raise
    except Exception as exc:  # requests' ReadTimeout, the engine's APIError, a dropped connection
        late = time.monotonic() > deadline
        raise ImageBuildError(f"the build took longer than {timeout_s:g} s" if late else one_line(str(exc))) from None
    if image_id is None:
        raise ImageBuildError("the engine reported no image")
    return image_id


def one_line(text: str) -> str:
    """A message of the engine as one line of at most a few hundred characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 1] + "…"


def _inodes_under(roots: Sequence[Path]) -> set[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    for root in roots:
        paths = [root] if root.is_file() else (p for p in root.rglob("*") if p.is_file())
        for path in paths:
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found
