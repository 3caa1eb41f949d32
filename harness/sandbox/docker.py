"""The Docker sandbox: the same contract as `bwrap`, through a Docker engine.

Each command runs in a fresh container that is removed when the command ends
(so nothing outlives it), built from the boundary like the bubblewrap sandbox:
only the boundary's roots are bind-mounted (read-only unless writable), hidden
packages are removed from site-packages, the root filesystem is read-only with
a private `/tmp`, the network is `none` unless allowed, the user is not root
(except the grader's, root with the few capabilities a uid drop takes, as under Harbor),
every other capability is dropped, privileges cannot be regained, and processes and
memory are capped. Containers carry the label `twin.sandbox`; `reap_containers`
removes any a killed harness left behind.

The interpreter and system roots come from the host (the boundary mounts them at
the same paths, site-packages as the pruned copy), so the image only has to provide
an empty root; it is `$TWIN_DOCKER_IMAGE`, else `twin-base:local`, which twin builds
once with `docker import` from an empty root filesystem (no registry is needed); a
published task whose image twin built runs on that image (`task_image.py`). The seccomp filter is the bwrap
sandbox's (`seccomp.docker_profile`); writable roots are handed to the container's
uid before each command and lose setuid/setgid bits after it, and are capped filesystems
where twin can mount them (`quota.py`: the host mounts them, the container binds them);
`/dev/shm` is the engine's tmpfs of `Limits.shm_mb`.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import threading
import time
import uuid
from pathlib import Path

from harness.ground.boundary import Boundary, Limits
from harness.ground.sandbox import ExecResult, SandboxError
from harness.sandbox.bwrap import read_checked, sandbox_env, write_checked
from harness.sandbox.packages import copied_inside, hidden_entries, pruned_site_dir, site_dirs
from harness.sandbox.presentation import Presenter, RootOverCaps
from harness.sandbox.privilege import settle_writable
from harness.sandbox.process import (
    DISK_POLL_S,
    DISK_RETURNCODE,
    TIMEOUT_RETURNCODE,
    DiskWatch,
    HeadTail,
    file_cap_reached,
)
from harness.sandbox.quota import cap_writable_roots, release_all
from harness.sandbox.seccomp import docker_profile
from harness.sandbox.task_image import task_image_for

LABEL = "twin.sandbox"
DEFAULT_IMAGE = "twin-base:local"
_BASE_DIRS = ("app", "assets", "dev", "etc", "logs", "proc", "run", "source", "sys", "tests", "tmp")
_STDIN_INSIDE = "/run/twin-stdin"
START_ATTEMPTS = 3
START_RETRY_S = 0.5
# What the engine says when the runtime lost a freshly created container before its command ran.
_TRANSIENT_START = ("cannot start a stopped process", "container not started")


def _client():
    """A connected Docker client, or SandboxError saying what is missing."""
    try:
        import docker
    except ImportError:
        raise SandboxError("sandbox 'docker' needs the docker package: pip install 'twin-harness[docker]'") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for "no engine"
        raise SandboxError(
            f"no Docker engine reachable ({exc.__class__.__name__}): start Docker or use --sandbox bwrap"
        ) from None
    return client


def container_user() -> str:
    """The user commands run as: the harness's own, or nobody when the harness is root."""
    uid, gid = os.getuid(), os.getgid()
    return f"{uid}:{gid}" if uid != 0 else "65534:65534"


# The grader's test.sh as Harbor runs it: root in its container, so that where its nested bubblewrap
# cannot start (Docker's seccomp profile, no user namespaces) it can drop the candidate's side to
# another uid; only the capabilities that takes, none of the rest (no CAP_SYS_ADMIN, no mounts).
GRADER_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]


def _user_and_caps(boundary: Boundary) -> dict:
    """Who a command runs as: roles and probes as `container_user()` with no capability; the grader
    (twin as root) as the container's root with `GRADER_CAPS`, as under Harbor."""
    if boundary.nested_sandbox and os.getuid() == 0:
        return {"user": "0:0", "cap_drop": ["ALL"], "cap_add": GRADER_CAPS}
    return {"user": container_user(), "cap_drop": ["ALL"]}


def container_config(
    boundary: Boundary,
    argv: list[str],
    *,
    workdir: str,
    env: dict[str, str],
    image: str,
    stdin_file: Path | None = None,
    scratch: Path | None = None,
) -> dict:
    """Keyword arguments of `containers.run` for one command (pure: no engine needed)."""
    volumes: dict[str, dict[str, str]] = {}
    for mount in boundary.mounts:
        if mount.inside == "/etc" and mount.host.is_dir():
            # the engine writes /etc/resolv.conf, hosts and hostname itself: bind the entries
            for entry in sorted(os.listdir(mount.host)):
                if entry not in ("hosts", "hostname", "resolv.conf"):
                    volumes[str(mount.host / entry)] = {"bind": f"/etc/{entry}", "mode": "ro"}
            continue
        if mount.inside == "/sbin":
            continue  # the engine's init is mounted at /sbin/docker-init; /usr/sbin has the rest
        volumes[str(mount.host)] = {"bind": mount.inside, "mode": "rw" if mount.writable else "ro"}
    packages = tuple(sorted(boundary.hidden_packages))
    for site_dir in site_dirs() if packages else []:
        inside = _inside_of(boundary, site_dir) or copied_inside(boundary.mounts, site_dir)
        drop = hidden_entries(site_dir, packages) if inside else frozenset()
        if drop:
            pruned = pruned_site_dir(site_dir, drop)
            if pruned is None:
                raise SandboxError(f"cannot hide {', '.join(packages)} from {site_dir} for docker")
            volumes[str(pruned)] = {"bind": inside, "mode": "ro"}
    for hidden in boundary.hidden:
        inside = _inside_of(boundary, hidden)
        if inside is not None and hidden.exists():
            empty = tempfile.mkdtemp(prefix="empty-", dir=scratch) if hidden.is_dir() else os.devnull
            volumes[empty] = {"bind": inside, "mode": "ro"}
    if stdin_file is not None:
        volumes[str(stdin_file)] = {"bind": _STDIN_INSIDE, "mode": "ro"}
        argv = ["/bin/sh", "-c", f'exec "$@" < {_STDIN_INSIDE}', "twin-stdin", *argv]
    limits = boundary.limits
    return dict(
        image=image,
        command=argv,
        detach=True,
        working_dir=workdir,
        environment=env,
        volumes=volumes,
        network_mode="bridge" if boundary.network else "none",
        **_user_and_caps(boundary),
        security_opt=[
            "no-new-privileges",
            "seccomp=" + docker_profile("nested" if boundary.nested_sandbox else "strict"),
        ],
        read_only=True,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmp_mb}m"},
        shm_size=f"{limits.shm_mb}m",
        pids_limit=limits.max_procs,
        ulimits=[
            {"Name": "as", "Soft": limits.memory_mb << 20, "Hard": limits.memory_mb << 20},
            {"Name": "core", "Soft": 0, "Hard": 0},
            {"Name": "fsize", "Soft": limits.file_bytes(), "Hard": limits.file_bytes()},
        ],
        mem_limit=f"{limits.memory_mb}m",
        memswap_limit=f"{limits.memory_mb}m",
        labels={LABEL: "1", f"{LABEL}.boundary": boundary.name},
        init=True,
    )


def _inside_of(boundary: Boundary, host: Path) -> str | None:
    best = None
    for mount in boundary.mounts:
        if host == mount.host or mount.host in host.parents:
            if best is None or len(mount.host.parts) > len(best[0].parts):
                best = (
                    mount.host,
                    os.path.normpath(f"{mount.inside}/{host.relative_to(mount.host)}"),
                )
    return best[1] if best else None


class DockerSandbox:
    """Runs each command in a fresh, labelled container that is always removed."""

    def __init__(self, boundary: Boundary, image: str | None = None) -> None:
        self.boundary = boundary
        # a published task whose image twin built runs on it (harness/sandbox/task_image.py)
        self.image = image or task_image_for(boundary) or os.environ.get("TWIN_DOCKER_IMAGE", DEFAULT_IMAGE)
        self._client = _client()
        if self.image == DEFAULT_IMAGE:
            ensure_base_image(self._client)
        self._capped = cap_writable_roots(boundary)  # before the presenter: a capped root needs no slot
        try:
            self._presenter = Presenter(boundary)
        except BaseException:
            release_all(self._capped)
            raise
        self._closed = False
        # Containers are reaped by this instance's own label: another sandbox with the same
        # boundary name (a parallel trial, another test worker) keeps its running containers.
        self._instance = uuid.uuid4().hex

    def exec(
        self,
        command: list[str] | str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run `command` (argv list, or a string run by `bash -c`) in a new container.

        A read-only root over the snapshot caps fails the command without starting one.
        """
        if self._closed:
            raise SandboxError(f"sandbox {self.boundary.name} is closed")
        workdir = posixpath.join(self.boundary.workdir, cwd or ".")
        if self.boundary.mount_for(os.path.normpath(workdir)) is not None:
            self.boundary.to_host(workdir)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        wall = timeout_s if timeout_s is not None else self.boundary.limits.wall_s
        bound = self._presenter.boundary()  # roots from their neutral slots
        try:
            self._presenter.enter()
        except RootOverCaps as over:  # the agent's tree grew over the caps: this command fails
            return over.result()
        try:
            return self._exec_entered(bound, argv, workdir, env, wall, stdin)
        finally:
            self._presenter.leave()

    def _exec_entered(self, bound: Boundary, argv, workdir, env, wall, stdin) -> ExecResult:
        with tempfile.TemporaryDirectory(prefix="twin-docker-") as scratch:
            stdin_file = None
            if stdin is not None:
                stdin_file = Path(scratch) / "stdin"
                stdin_file.write_text(stdin)
            disk = DiskWatch.of(bound.mounts, bound.limits.disk_mb)  # the per-file cap: what is left under it
            bound = bound.model_copy(update={"limits": disk.budgeted(bound.limits)})
            config = container_config(
                bound,
                argv,
                workdir=workdir,
                env=sandbox_env(self.boundary, env),
                image=self.image,
                stdin_file=stdin_file,
                scratch=Path(scratch),
            )
            config["labels"][f"{LABEL}.instance"] = self._instance
            for root in disk.roots:
                settle_writable(root)
            try:
                return self._run(config, wall, disk, bound.limits)
            finally:
                for root in disk.roots:
                    settle_writable(root)

    def _start(self, config: dict):
        """Create and start the container, retrying a start the runtime lost before the command ran.

        Under load the OCI runtime sometimes loses a container between create and start
        ("cannot start a stopped process"): the command never ran, so a fresh container is
        safe to try. A failed create, or a start that fails every time, is the sandbox's error.
        """
        create = {key: value for key, value in config.items() if key != "detach"}
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                container = self._client.containers.create(**create)
            except Exception as exc:
                raise SandboxError(f"docker could not create the container: {exc}") from None
            try:
                container.start()
                return container
            except Exception as exc:
                _remove(container)
                if attempt == START_ATTEMPTS or not _lost_before_start(exc):
                    raise SandboxError(f"docker could not start the command: {exc}") from None
                time.sleep(START_RETRY_S * attempt)
        raise AssertionError("unreachable")

    def _run(self, config: dict, wall: float, disk: DiskWatch, limits: Limits) -> ExecResult:
        start = time.monotonic()
        container = self._start(config)
        timed_out = False
        over: list[str] = []
        finished = threading.Event()

        def watch_disk() -> None:
            while not finished.wait(DISK_POLL_S):
                reason = disk.over()
                if reason is not None:
                    over.append(reason)
                    try:
                        container.kill()
                    except Exception:
                        pass
                    return

        if disk.roots:
            threading.Thread(target=watch_disk, daemon=True).start()
        try:
            try:
                status = container.wait(timeout=wall)
                returncode = int(status.get("StatusCode", 1))
            except Exception:  # requests' ReadTimeout/ConnectionError: the wall time passed
                timed_out = True
                container.kill()
                returncode = TIMEOUT_RETURNCODE
            out, err = (
                HeadTail(self.boundary.limits.output_bytes),
                HeadTail(self.boundary.limits.output_bytes),
            )
            for chunk in container.logs(stdout=True, stderr=False, stream=True):
                out.feed(chunk)
            for chunk in container.logs(stdout=False, stderr=True, stream=True):
                err.feed(chunk)
        finally:
            finished.set()
            _remove(container)
        exceeded = over[0] if over else (disk.over() if disk.roots else None)
        exceeded = exceeded or file_cap_reached(returncode, limits)
        stderr = err.text()
        if exceeded is not None:
            returncode = DISK_RETURNCODE
            stderr += f"\ntwin: the command was stopped: {exceeded}\n"
        return ExecResult(
            returncode=returncode,
            stdout=out.text(),
            stderr=stderr,
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
            duration_s=time.monotonic() - start,
            exceeded=exceeded,
        )

    def read_file(self, path: str) -> bytes:
        """Read a file (checked against the boundary first; read on the host)."""
        return read_checked(self.boundary, path)

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file under the writable root (checked against the boundary first)."""
        write_checked(self.boundary, path, data)

    def close(self) -> None:
        """Remove any container of this sandbox that is still there; release its capped roots."""
        if self._closed:
            return
        self._closed = True
        try:
            reap_containers(self._client, instance=self._instance)
        finally:
            self._presenter.close()
            release_all(self._capped)


def ensure_base_image(client) -> str:
    """Build `twin-base:local` (an empty root with mount points) with `docker import` if missing.

    Raises:
        SandboxError: the engine refused the import.
    """
    import io
    import tarfile

    try:
        client.images.get(DEFAULT_IMAGE)
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
        client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)
    except Exception as exc:
        raise SandboxError(f"cannot build the local image {DEFAULT_IMAGE}: {exc}") from None
    return DEFAULT_IMAGE


def reap_containers(client=None, *, boundary: str | None = None, instance: str | None = None) -> int:
    """Remove containers labelled by twin (all, one boundary's, or one sandbox's); returns how many."""
    client = client or _client()
    label = LABEL
    if instance is not None:
        label = f"{LABEL}.instance={instance}"
    elif boundary is not None:
        label = f"{LABEL}.boundary={boundary}"
    removed = 0
    for container in client.containers.list(all=True, filters={"label": label}):
        removed += _remove(container)
    return removed


def _lost_before_start(exc: Exception) -> bool:
    """Whether a failed start is the runtime's transient loss of a container it had just created."""
    text = str(exc).lower()
    return any(sign in text for sign in _TRANSIENT_START)


def _remove(container) -> int:
    """Remove a container; one already gone or being removed counts as removed by someone else (0)."""
    try:
        container.remove(force=True)
        return 1
    except Exception:  # docker.errors.NotFound / APIError 409 "removal already in progress"
        return 0
