"""Images built from a task's environment/: the build context (no engine needed) and, with an engine, a build."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from ground.boundary import Boundary, Mount
from ground.sandboxes.task_image import (
    ImageBuildError,
    build_task_image,
    context_digest,
    context_entries,
    write_context,
)
from tests.conftest import docker_engine

# A RUN that writes a file, runnable in an image FROM twin-base:local (an empty root): the host's
# dash and the libraries it needs are copied into the context and started through their loader.
RUN_WRITES_A_FILE = (
    'RUN ["/opt/shell/ld.so", "--library-path", "/opt/shell", "/opt/shell/sh", "-c", '
    '"echo honoured > /app/from_run.txt"]'
)


needs_engine = pytest.mark.skipif(not docker_engine(), reason="no Docker engine")
needs_sdk = pytest.mark.skipif(importlib.util.find_spec("docker") is None, reason="needs the docker package")


def copy_shell(directory: Path) -> None:
    """dash, its libraries and its loader (as `ld.so`) in `directory`, for a RUN in an empty image."""
    dash = shutil.which("dash")
    if dash is None or shutil.which("ldd") is None:
        pytest.skip("needs dash and ldd to give an empty image a shell")
    directory.mkdir(parents=True)
    listed = subprocess.run(["ldd", dash], capture_output=True, text=True, check=True).stdout
    for library in re.findall(r"(/\S+)", listed):
        name = "ld.so" if "ld-linux" in library else Path(library).name
        shutil.copy(Path(library).resolve(), directory / name)
    shutil.copy(dash, directory / "sh")


def task_dir(root: Path, dockerfile: str) -> Path:
    """A task directory with hidden files beside environment/ (tests/, solution/, task.toml)."""
    env = root / "environment"
    (env / "src").mkdir(parents=True)
    (env / "src" / "model.py").write_text("import torch\n")
    (env / "Dockerfile").write_text(dockerfile)
    (root / "tests").mkdir()
    (root / "tests" / "secret.txt").write_text("reference\n")
    (root / "solution").mkdir()
    (root / "solution" / "answer.py").write_text("x = 1\n")
    (root / "task.toml").write_text('version = "1.0"\n')
    return root


def hidden(root: Path) -> list[Path]:
    return [root / "tests", root / "solution", root / "task.toml"]


@needs_sdk
def test_the_build_context_is_environment_alone(tmp_path):
    root = task_dir(tmp_path / "t", "FROM twin-base:local\nCOPY . /app\n")
    env = root / "environment"
    (env / "leak").symlink_to(root / "tests" / "secret.txt")  # leads out of the context: left out
    (env / "inside").symlink_to("src/model.py")
    entries = context_entries(env, hidden(root))
    names = {name for name, _ in entries}
    assert names == {"Dockerfile", "src", "src/model.py", "inside"}
    assert all(env.resolve() in path.parents for _, path in entries)
    body = io.BytesIO()
    write_context(entries, body)
    body.seek(0)
    with tarfile.open(fileobj=body) as tar:
        assert set(tar.getnames()) == names
        assert b"reference" not in b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isreg())


@needs_sdk
def test_a_hard_link_to_a_hidden_file_refuses_the_build(tmp_path):
    root = task_dir(tmp_path / "t", "FROM twin-base:local\n")
    os.link(root / "tests" / "secret.txt", root / "environment" / "copy.txt")
    with pytest.raises(ImageBuildError, match="hard link to one of the task's hidden files"):
        context_entries(root / "environment", hidden(root))


@needs_sdk
def test_dockerignore_and_the_digest(tmp_path):
    root = task_dir(tmp_path / "t", "FROM twin-base:local\n")
    env = root / "environment"
    (env / "scratch.bin").write_bytes(b"\0" * 8)
    (env / ".dockerignore").write_text("# not sent\nscratch.bin\n")
    entries = context_entries(env, hidden(root))
    assert "scratch.bin" not in {name for name, _ in entries}
    digest = context_digest(entries)
    os.utime(env / "src" / "model.py", (1, 1))
    assert context_digest(entries) == digest  # times do not count
    (env / "src" / "model.py").write_text("import torch  # changed\n")
    assert context_digest(entries) != digest


@needs_engine
def test_an_image_from_twin_base_is_built_once_and_a_docker_sandbox_sees_what_its_run_wrote(tmp_path):
    """What the RUN wrote is there; what the Dockerfile lays out is only where a boundary mounts it."""
    from ground.isolation import python_mounts
    from ground.sandboxes.registry import make_sandbox

    dockerfile = "\n".join(
        [
            "FROM twin-base:local",
            "COPY shell /opt/shell",
            RUN_WRITES_A_FILE,
            "COPY src /app/src",
            "ENV API_TOKEN=not-for-commands MODE=built",
            'ENTRYPOINT ["/opt/shell/sh"]',
            "HEALTHCHECK CMD /opt/shell/sh -c true",
            "WORKDIR /app",
            "",
        ]
    )
    root = task_dir(tmp_path / "t", dockerfile)
    copy_shell(root / "environment" / "shell")
    laid_out = ["/opt/shell", "/app/src"]
    image = build_task_image(root / "environment", hidden=hidden(root), laid_out=laid_out)
    assert image.startswith("twin-task:")
    assert build_task_image(root / "environment", hidden=hidden(root), laid_out=laid_out) == image  # reused
    (tmp_path / "cand").mkdir()
    command = 'cat from_run.txt; ls /app/src || echo no-src; echo "[${API_TOKEN-unset}] $MODE"; ls -A /tests /opt'
    outputs = []
    for mounts in ([], [Mount(host=root / "environment" / "src", inside="/app/src")]):
        boundary = Boundary(
            name="migrator",
            mounts=[*python_mounts(), Mount(host=tmp_path / "cand", inside="/app/jax_repo", writable=True), *mounts],
            hidden=hidden(root),
            workdir="/app",
            image=image,
        )
        sandbox = make_sandbox("docker", boundary)
        try:
            assert sandbox.image == image
            outputs.append(sandbox.exec(command, timeout_s=60).stdout.splitlines())
        finally:
            sandbox.close()
    without, mounted = outputs
    assert without[:3] == ["honoured", "no-src", "[unset] built"], without
    assert mounted[:3] == ["honoured", "model.py", "[unset] built"], mounted
    assert "secret.txt" not in without and "shell" not in without  # nothing of tests/, no laid-out path


@needs_engine
def test_a_from_image_that_cannot_be_pulled_fails_in_one_line(tmp_path):
    root = task_dir(tmp_path / "t", "FROM twin-test-absent:none\nCOPY src /app/src\n")
    with pytest.raises(ImageBuildError) as info:
        build_task_image(root / "environment", hidden=hidden(root), timeout_s=120)
    message = str(info.value)
    assert message.startswith("FROM twin-test-absent:none: ") and "\n" not in message


def test_a_file_holding_another_entrys_header_does_not_share_a_context_digest(tmp_path):
    import stat as stat_

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (two / "a").write_text("x")
    (two / "b").write_text("y")
    kind, mode = stat_.S_IFREG, stat_.S_IMODE((two / "b").stat().st_mode)
    (one / "a").write_text(f"x\0b\0{kind}\0{mode}\0y")  # the joined header of the old digest, inside a file
    (one / "a").chmod(mode)
    assert context_digest([("a", one / "a")]) != context_digest([("a", two / "a"), ("b", two / "b")])
