"""The Docker sandbox: its container settings (no engine needed) and, with an engine, a run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ground.boundary import Boundary, Limits, Mount
from ground.sandbox import SandboxError
from ground.sandboxes.docker import container_config, container_user
from ground.sandboxes.docker_engine import LABEL
from ground.sandboxes.registry import make_sandbox
from tests.conftest import docker_engine


def boundary(tmp_path: Path, **kwargs) -> Boundary:
    (tmp_path / "cand").mkdir(exist_ok=True)
    (tmp_path / "src" / "hidden").mkdir(parents=True, exist_ok=True)
    fields = dict(
        name="migrator",
        mounts=[
            Mount(host=tmp_path / "cand", inside="/app", writable=True),
            Mount(host=tmp_path / "src", inside="/source"),
        ],
        hidden=[tmp_path / "src" / "hidden"],
        limits=Limits(max_procs=32, memory_mb=512),
        workdir="/app",
    )
    fields.update(kwargs)
    return Boundary(**fields)


def test_container_is_locked_down(tmp_path):
    config = container_config(
        boundary(tmp_path),
        ["true"],
        workdir="/app",
        env={"HOME": "/tmp"},
        image="img",
        scratch=tmp_path,
    )
    assert config["network_mode"] == "none"
    assert config["cap_drop"] == ["ALL"] and "no-new-privileges" in config["security_opt"]
    assert config["read_only"] and "/tmp" in config["tmpfs"]
    assert config["pids_limit"] == 32 and config["mem_limit"] == "512m"
    assert config["labels"][LABEL] == "1"
    assert not config["user"].startswith("0:")
    volumes = config["volumes"]
    assert volumes[str((tmp_path / "cand").resolve())] == {"bind": "/app", "mode": "rw"}
    assert volumes[str((tmp_path / "src").resolve())] == {"bind": "/source", "mode": "ro"}
    covers = [v for v in volumes.values() if v["bind"] == "/source/hidden"]
    assert covers == [{"bind": "/source/hidden", "mode": "ro"}]
    assert config["environment"] == {"HOME": "/tmp"}


def test_a_code_confined_boundary_is_refused(tmp_path):
    """A bind mount of the engine cannot be made noexec: refused, never mounted executable."""
    (tmp_path / "scratch").mkdir()
    confined = boundary(tmp_path, mounts=[Mount(host=tmp_path / "scratch", inside="/scratch", executable=False)])
    with pytest.raises(SandboxError, match="cannot mount a root non-executable"):
        container_config(confined, ["true"], workdir="/", env={}, image="img")


def test_network_only_when_allowed(tmp_path):
    config = container_config(
        boundary(tmp_path, network=True), ["true"], workdir="/app", env={}, image="img"
    )
    assert config["network_mode"] == "bridge"


def test_user_is_never_root():
    user = container_user()
    assert user.split(":")[0] != "0"
    if os.getuid() != 0:
        assert user == f"{os.getuid()}:{os.getgid()}"


@pytest.mark.parametrize("nested", [False, True])
def test_only_the_graders_container_is_root_with_the_caps_of_a_uid_drop(tmp_path, monkeypatch, nested):
    import ground.sandboxes.docker as docker_module

    monkeypatch.setattr(docker_module.os, "getuid", lambda: 0)
    b = boundary(tmp_path, nested_sandbox=nested)
    config = container_config(b, ["true"], workdir="/app", env={}, image="img")
    assert config["cap_drop"] == ["ALL"] and "no-new-privileges" in config["security_opt"]
    if nested:  # the grader, as Harbor runs it
        assert config["user"] == "0:0"
        assert set(config["cap_add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}
    else:
        assert config["user"] == "65534:65534" and "cap_add" not in config


def test_hidden_packages_are_replaced_by_a_pruned_site_packages(tmp_path):
    import sys

    from ground.isolation import python_mounts

    b = Boundary(name="c", mounts=python_mounts(), hidden_packages=["torch"])
    config = container_config(b, ["true"], workdir="/", env={}, image="img")
    site = next(v for v in config["volumes"].items() if v[1]["bind"].endswith("site-packages"))
    assert site[1]["bind"].startswith(sys.prefix)
    assert not (Path(site[0]) / "torch").exists() and (Path(site[0]) / "numpy").exists()


def test_hidden_packages_are_pruned_from_an_interpreter_copied_for_the_sandbox_uid(tmp_path):
    """twin as root with its venv under /root: the venv is a copy mounted at its own path."""
    import sys

    from ground.isolation import python_mounts

    mounts = [m for m in python_mounts() if m.inside != sys.prefix]
    mounts.append(Mount(host=tmp_path / "copy", inside=sys.prefix))
    b = Boundary(name="c", mounts=mounts, hidden_packages=["torch"])
    config = container_config(b, ["true"], workdir="/", env={}, image="img")
    binds = {v["bind"]: Path(host) for host, v in config["volumes"].items()}
    site = next(inside for inside in binds if inside.startswith(sys.prefix) and inside.endswith("site-packages"))
    assert not (binds[site] / "torch").exists() and (binds[site] / "numpy").exists()


def test_stdin_goes_through_a_mounted_file(tmp_path):
    stdin = tmp_path / "stdin"
    stdin.write_text("x")
    config = container_config(
        boundary(tmp_path), ["cat"], workdir="/app", env={}, image="img", stdin_file=stdin
    )
    assert config["command"][-1] == "cat" and config["command"][0] == "/bin/sh"
    assert config["volumes"][str(stdin)]["mode"] == "ro"


def test_without_engine_make_sandbox_says_so(tmp_path):
    if docker_engine():
        pytest.skip("a Docker engine is running here")
    with pytest.raises(SandboxError, match="Docker"):
        make_sandbox("docker", boundary(tmp_path))


def test_local_base_image_is_built_without_a_registry():
    """The default image is imported from an empty root: nothing is pulled."""
    if not docker_engine():
        pytest.skip("no Docker engine running here")
    import docker

    from ground.sandboxes.docker_engine import DEFAULT_IMAGE, ensure_base_image

    client = docker.from_env()
    assert ensure_base_image(client) == DEFAULT_IMAGE
    assert client.images.get(DEFAULT_IMAGE).attrs["RootFS"]["Layers"]


@pytest.mark.skipif(not docker_engine(), reason="no Docker engine")
def test_docker_run_end_to_end(tmp_path):
    from ground.isolation import python_mounts

    sandbox = make_sandbox(
        "docker", boundary(tmp_path, mounts=[*python_mounts(), Mount(host=tmp_path, inside="/app")])
    )
    try:
        result = sandbox.exec("echo hi; id -u; ls /source", timeout_s=60)
        assert result.stdout.splitlines()[0] == "hi"
        assert result.stdout.splitlines()[1] != "0"
        assert sandbox.exec("sleep 30", timeout_s=1).timed_out
    finally:
        sandbox.close()


@pytest.mark.skipif(not docker_engine(), reason="no Docker engine")
def test_closing_a_sandbox_leaves_another_with_the_same_boundary_name_running(tmp_path):
    """Parallel trials share boundary names; closing one must not reap the other's containers."""
    import threading

    from ground.isolation import python_mounts

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = make_sandbox("docker", boundary(tmp_path / "a", mounts=[*python_mounts()]))
    second = make_sandbox("docker", boundary(tmp_path / "b", mounts=[*python_mounts()]))
    results = []
    try:
        runner = threading.Thread(target=lambda: results.append(second.exec("sleep 3; echo survived", timeout_s=60)))
        runner.start()
        import time

        time.sleep(1.5)
        first.close()
        runner.join()
    finally:
        first.close()
        second.close()
    assert results and results[0].returncode == 0 and results[0].stdout.strip() == "survived"


class _LostContainer:
    """A container whose start fails with `errors` in turn, then succeeds; removal is recorded."""

    def __init__(self, log: list, error: Exception | None) -> None:
        self.log, self.error = log, error

    def start(self):
        if self.error is not None:
            raise self.error
        self.log.append("started")

    def remove(self, force=False):
        self.log.append("removed")


class _Containers:
    def __init__(self, errors: list) -> None:
        self.errors, self.log, self.created = list(errors), [], []

    def create(self, **config):
        assert "detach" not in config
        self.created.append(config)
        return _LostContainer(self.log, self.errors.pop(0) if self.errors else None)


def _sandbox_with(containers: _Containers, tmp_path: Path):
    from ground.sandboxes.docker import DockerSandbox

    sandbox = DockerSandbox.__new__(DockerSandbox)
    sandbox.boundary = boundary(tmp_path)
    sandbox._client = type("Client", (), {"containers": containers})()
    return sandbox


def test_a_container_the_runtime_lost_before_start_is_removed_and_tried_afresh(tmp_path, monkeypatch):
    monkeypatch.setattr("ground.sandboxes.docker.START_RETRY_S", 0)
    lost = RuntimeError('500 Server Error: ("cannot start a stopped process: unknown")')
    containers = _Containers([lost, lost])
    _sandbox_with(containers, tmp_path)._start({"image": "x", "detach": True})
    assert containers.log == ["removed", "removed", "started"]
    assert len(containers.created) == 3


def test_a_start_that_keeps_failing_or_fails_otherwise_is_an_error_and_leaves_no_container(tmp_path, monkeypatch):
    monkeypatch.setattr("ground.sandboxes.docker.START_RETRY_S", 0)
    lost = RuntimeError("cannot start a stopped process: unknown")
    containers = _Containers([lost, lost, lost, lost])
    with pytest.raises(SandboxError, match="could not start"):
        _sandbox_with(containers, tmp_path)._start({"image": "x"})
    assert containers.log == ["removed"] * 3

    other = _Containers([RuntimeError("invalid mount config")])
    with pytest.raises(SandboxError, match="invalid mount"):
        _sandbox_with(other, tmp_path)._start({"image": "x"})
    assert other.log == ["removed"] and len(other.created) == 1
