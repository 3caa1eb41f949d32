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
once with `docker import` from an empty root filesystem (no registry is needed;
`docker_engine.py`); a published task whose image twin built runs on that image
(`task_image.py`). The seccomp filter is the bwrap sandbox's (`seccomp.docker_profile`);
writable roots are handed to the container's uid before each command and lose
setuid/setgid bits after it, and are capped filesystems where twin can mount them
(`quota.py`: the host mounts them, the container binds them); `/dev/shm` is the
engine's tmpfs of `Limits.shm_mb`.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import time
import uuid
from pathlib import Path

from ground.boundary import Boundary, Limits
from ground.sandbox import ExecResult, SandboxError
from ground.sandboxes import docker_engine
from ground.sandboxes.base import BoundarySandbox, PresentedRoots, sandbox_env
from ground.sandboxes.disk import DiskGuard, DiskWatch
from ground.sandboxes.docker_engine import DEFAULT_IMAGE, LABEL, ensure_base_image, reap_containers, remove_container
from ground.sandboxes.packages import copied_inside, hidden_entries, pruned_site_dir, site_dirs
from ground.sandboxes.presentation import RootOverCaps
from ground.sandboxes.privilege import settle_writable
from ground.sandboxes.process import TIMEOUT_RETURNCODE, HeadTail, command_result
from ground.sandboxes.seccomp import docker_profile

_STDIN_INSIDE = "/run/twin-stdin"
START_ATTEMPTS = 3
START_RETRY_S = 0.5
# What the engine says when the runtime lost a freshly created container before its command ran.
_TRANSIENT_START = ("cannot start a stopped process", "container not started")


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
    """Keyword arguments of `containers.run` for one command (pure: no engine needed).

    Raises:
        SandboxError: the boundary is code-confined (`Boundary.code_confined`): a bind mount of
            the engine cannot be made noexec, so it refuses rather than let its files load.
    """
    if boundary.code_confined:
        raise SandboxError(f"boundary {boundary.name}: the docker sandbox cannot mount a root non-executable")
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
        inside = boundary.inside_of(site_dir) or copied_inside(boundary.mounts, site_dir)
        drop = hidden_entries(site_dir, packages) if inside else frozenset()
        if drop:
            pruned = pruned_site_dir(site_dir, drop)
            if pruned is None:
                raise SandboxError(f"cannot hide {', '.join(packages)} from {site_dir} for docker")
            volumes[str(pruned)] = {"bind": inside, "mode": "ro"}
    for hidden in boundary.hidden:
        inside = boundary.inside_of(hidden)
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


class DockerSandbox(BoundarySandbox):
    """Runs each command in a fresh, labelled container that is always removed."""

    def __init__(self, boundary: Boundary, image: str | None = None) -> None:
        # a published task whose image twin built runs on it (Boundary.image; ground/sandboxes/task_image.py)
        self.image = image or boundary.image or os.environ.get("TWIN_DOCKER_IMAGE", DEFAULT_IMAGE)
        self._client = docker_engine.client()
        if self.image == DEFAULT_IMAGE:
            ensure_base_image(self._client)
        roots = PresentedRoots(boundary)
        super().__init__(boundary, roots)
        self._presenter = roots.presenter
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
        self._refuse_if_closed()
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
                remove_container(container)
                if attempt == START_ATTEMPTS or not _lost_before_start(exc):
                    raise SandboxError(f"docker could not start the command: {exc}") from None
                time.sleep(START_RETRY_S * attempt)
        raise AssertionError("unreachable")

    def _run(self, config: dict, wall: float, disk: DiskWatch, limits: Limits) -> ExecResult:
        start = time.monotonic()
        container = self._start(config)
        timed_out = False

        def stop() -> None:
            try:
                container.kill()
            except Exception:
                pass

        guard = DiskGuard(disk, stop)
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
            guard.finish()
            remove_container(container)
        return command_result(
            returncode, out, err, timed_out=timed_out, started=start, exceeded=guard.exceeded(), limits=limits
        )

    def _release(self) -> None:
        """Remove any container of this sandbox that is still there."""
        reap_containers(self._client, instance=self._instance)


def _lost_before_start(exc: Exception) -> bool:
    """Whether a failed start is the runtime's transient loss of a container it had just created."""
    text = str(exc).lower()
    return any(sign in text for sign in _TRANSIENT_START)
