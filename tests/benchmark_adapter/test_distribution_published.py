"""A published task whose original is a declared distribution: its Dockerfile fetches it, twin lays it out.

The Dockerfile's RUN (pip download, sha256 check, the declared files copied) is run for real
here, without docker, against a local index; twin honours exactly that RUN text when it reads
the task without docker. `twin task new --source pypi:NAME==VERSION` writes such a task.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.cli.app import main
from task_model.distribution import materialize, original_dir
from task_model.distribution_install import declaration_toml, dockerfile_fetch_run
from task_model.dockerfile import DockerfileError
from task_model.loader import load_task
from tests.benchmark_adapter.test_distribution import FILES, declaration
from tests.fakes.wheels import build_wheel

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tasks" / "published" / "tiny-net"
MOUNT = "/app/torch_orig"


def published_task(root: Path, original, run: str) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(f"FROM python:3.11-slim\nRUN {run}\nWORKDIR /app\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (root / "instruction.md").write_text("The original is in /app/torch_orig; write the port in /app/jax_repo.\n")
    (root / "task.toml").write_text('version = "1.0"\n\n' + declaration_toml(original))
    return root


def test_the_dockerfiles_run_lays_out_what_twin_lays_out(local_index, tmp_path):
    wheel = build_wheel(local_index, FILES)
    original = declaration(wheel)
    inside, work = tmp_path / "image" / "app" / "torch_orig", tmp_path / "work"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = dockerfile_fetch_run(original, str(inside), work=str(work))
    subprocess.run(["sh", "-c", run], check=True, env=env, capture_output=True)
    laid_out = materialize(original)
    image = sorted(str(p.relative_to(inside)) for p in inside.rglob("*") if p.is_file())
    assert image == sorted(str(p.relative_to(laid_out)) for p in laid_out.rglob("*") if p.is_file())
    assert all((inside / f).read_bytes() == (laid_out / f).read_bytes() for f in image)
    assert not work.exists()
    wrong = dockerfile_fetch_run(declaration(wheel, sha256="2" * 64), str(tmp_path / "other"), work=str(work))
    proc = subprocess.run(["sh", "-c", wrong], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr  # sha256sum -c stops the build
    assert not (tmp_path / "other").exists()


def test_twin_reads_the_published_task_with_its_original_from_the_cache(local_index, tmp_path):
    original = declaration(build_wheel(local_index, FILES), mount=MOUNT)
    root = published_task(tmp_path / "task", original, dockerfile_fetch_run(original, MOUNT))
    task = load_task(root)
    assert task.source_dir == original_dir(original)
    assert task.settings.source_mount == MOUNT and task.settings.candidate_mount == "/app/jax_repo"
    assert any("lays out the declared original at /app/torch_orig" in note for note in task.environment.notes)


def test_a_run_that_fetches_anything_else_is_refused(local_index, tmp_path):
    original = declaration(build_wheel(local_index, FILES), mount=MOUNT)
    other = dockerfile_fetch_run(declaration(Path(local_index / original.wheel), files=["fakeorig"]), MOUNT)
    root = published_task(tmp_path / "task", original, other)
    with pytest.raises(DockerfileError, match="cannot run without docker"):
        load_task(root)


def test_twin_task_new_from_a_distribution(local_index, tmp_path, capsys):
    """tiny-net's original served as a distribution: the task declares it and holds none of its files."""
    files = {
        f"tiny_net/{p.name}": p.read_text() for p in (TINY / "environment" / "torch_orig" / "tiny_net").glob("*.py")
    }
    build_wheel(local_index, files, name="tinynet", version="0.1")
    dest = tmp_path / "made"
    args = ["task", "new", str(dest), "--source", "pypi:tinynet==0.1", "--include", "tiny_net",
            "--probe", str(TINY / "tests" / "probes" / "tiny_net.py"),
            "--assets", str(TINY / "environment" / "checkpoint"),
            "--instruction", str(TINY / "instruction.md"), "--sandbox", "none"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert dest.stat().st_mode & 0o777 == 0o755  # a task directory like any other
    declared = tomllib.loads((dest / "task.toml").read_text())["metadata"]["twin"]["original"]
    assert declared["distribution"] == "tinynet" and declared["files"] == ["tiny_net"] and declared["mount"] == MOUNT
    assert not (dest / "environment" / "torch_orig").exists()
    assert not [p for p in dest.rglob("*.py") if p.read_text() in files.values()]
    assert "sha256sum -c" in (dest / "environment" / "Dockerfile").read_text()
    assert load_task(dest).source_dir.joinpath("tiny_net", "model.py").read_text() == files["tiny_net/model.py"]
    assert (dest / "tests" / "refs").is_dir()
    capsys.readouterr()  # what making it said (a wait over 2 s says what it waits for)
    shutil.rmtree(tmp_path / "cache")  # a fresh machine without the index: one line, non-zero
    (local_index / "tinynet-0.1-py3-none-any.whl").unlink()
    assert main(["task", "check", str(dest), "--no-defects", "--sandbox", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot download tinynet==0.1 from the package index" in err


def test_include_needs_a_distribution_and_a_distribution_needs_include(local_index, tmp_path, capsys):
    build_wheel(local_index, FILES)
    probe = ["--probe", str(TINY / "tests" / "probes" / "tiny_net.py"), "--interface", "f"]
    cases = [
        (["--source", str(TINY / "environment" / "torch_orig"), "--include", "x", *probe], "--include applies"),
        (["--source", "pypi:fakeorig==1.0", *probe], "at least one --include"),
        (["--source", "pypi:fakeorig>=1.0", "--include", "fakeorig", *probe], "pypi:NAME==VERSION"),
        (["--source", "pypi:fakeorig==1.0", "--include", "nothing", *probe], "has no such file"),
    ]
    for args, message in cases:
        assert main(["task", "new", str(tmp_path / "t"), *args]) == 2, message
        assert message in " ".join(capsys.readouterr().err.split())
        assert not (tmp_path / "t").exists()


@pytest.mark.heavy  # pip resolves and installs the reference environment for real, then references are recorded
def test_twin_task_new_installs_the_reference_environments_lock_in_its_dockerfile(local_index, tmp_path, capsys):
    import hashlib

    from task_model.reference_env import built

    files = {
        f"tiny_net/{p.name}": p.read_text() for p in (TINY / "environment" / "torch_orig" / "tiny_net").glob("*.py")
    }
    files["tiny_net/__init__.py"] = "import tinydep\n" + files.get("tiny_net/__init__.py", "")
    dep = build_wheel(local_index, {"tinydep/__init__.py": ""}, name="tinydep", version="1.0")
    build_wheel(local_index, files, name="tinynet", version="0.2", requires=("tinydep>=1.0",))
    dest = tmp_path / "made"
    args = ["task", "new", str(dest), "--source", "pypi:tinynet==0.2", "--include", "tiny_net",
            "--probe", str(TINY / "tests" / "probes" / "tiny_net.py"),
            "--assets", str(TINY / "environment" / "checkpoint"),
            "--instruction", str(TINY / "instruction.md"), "--sandbox", "none"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    dockerfile = (dest / "environment" / "Dockerfile").read_text()
    assert f"tinydep==1.0 --hash=sha256:{hashlib.sha256(dep.read_bytes()).hexdigest()}" in dockerfile
    assert "--require-hashes" in dockerfile and "--no-deps" in dockerfile
    task = load_task(dest)
    assert built(task.settings.original).lock[0].name == "tinydep"
    assert any("installs the original's dependencies: its reference environment" in n for n in task.environment.notes)
