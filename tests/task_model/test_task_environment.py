"""A published task under the sandbox it runs in: its image built under docker, its notes shown, its WORKDIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ground.sandbox import SandboxError
from harness.cli.app import main
from task_model.dockerfile import RunRefused
from task_model.layout import command_workdir
from task_model.loader import load_task, load_task_for_sandbox
from task_model.model import TaskError
from tests.ground.sandboxes.test_task_image import RUN_WRITES_A_FILE, copy_shell, needs_engine
from tests.task_model.test_published import make_task

REPO = Path(__file__).resolve().parents[2]
BUILT = f"""FROM twin-base:local
COPY shell /opt/shell
{RUN_WRITES_A_FILE}
COPY torch_orig /app/torch_orig
COPY checkpoint /app/checkpoint
WORKDIR /app
"""
REWARD_IF_BUILT = (
    "#!/bin/bash\n"
    "test -f /app/from_run.txt && test -f /app/torch_orig/net/model.py && echo 1 > /logs/verifier/reward.txt "
    "|| echo 0 > /logs/verifier/reward.txt\n"
)


@pytest.mark.parametrize(
    "dockerfile, line",
    [
        ("FROM a\nVOLUME /data\n", "task t: Dockerfile:2: VOLUME is not supported without docker"),
        ("FROM a\nRUN make all\nCOPY torch_orig /app/torch_orig\n", "task t: Dockerfile:2: RUN `make all` cannot run"),
    ],
)
def test_refusals_name_the_task_like_every_other_task_error(tmp_path, dockerfile, line):
    make_task(tmp_path / "t", dockerfile=dockerfile)
    with pytest.raises(TaskError) as info:
        load_task_for_sandbox(tmp_path / "t", "bwrap", say=pytest.fail)
    assert str(info.value).startswith(line)


def test_grade_shows_the_dockerfile_notes_once_on_stderr(tmp_path, capsys):
    dockerfile = "FROM python:3.11-slim\nRUN pip install numpy\nCOPY torch_orig /app/torch_orig\nLABEL a=b\n"
    make_task(tmp_path / "t", dockerfile=dockerfile)
    (tmp_path / "cand").mkdir()
    main(["grade", "--task", str(tmp_path / "t"), "--candidate", str(tmp_path / "cand")])
    captured = capsys.readouterr()
    accepted = "note: Dockerfile:2: RUN install accepted: numpy already in twin's environment"
    assert captured.err.count(accepted) == 1 and "note: Dockerfile:4: LABEL skipped" in captured.err
    assert "note:" not in captured.out


def test_without_an_engine_docker_lays_the_files_out_after_one_line(tmp_path, monkeypatch):
    def no_engine():
        raise SandboxError("no Docker engine reachable (DockerException): start Docker or use --sandbox bwrap")

    monkeypatch.setattr("ground.sandboxes.docker_engine.client", no_engine)
    make_task(tmp_path / "t", dockerfile="FROM python:3.11-slim\nCOPY torch_orig /app/torch_orig\n")
    lines: list[str] = []
    task = load_task_for_sandbox(tmp_path / "t", "docker", say=lines.append)
    built = [line for line in lines if "image was not built" in line]
    assert built == [
        "note: task t: its image was not built (no Docker engine reachable (DockerException): start Docker or "
        "use --sandbox bwrap); its files are laid out instead"
    ]
    assert task.settings.source_mount == "/app/torch_orig" and "twin runs with its own environment" in lines[-1]
    make_task(tmp_path / "r", dockerfile="FROM python:3.11-slim\nRUN make\nCOPY torch_orig /app/torch_orig\n")
    with pytest.raises(RunRefused, match="task r: Dockerfile:2: RUN `make` cannot run without docker"):
        load_task_for_sandbox(tmp_path / "r", "docker", say=lines.append)


def test_commands_start_in_the_workdir_where_the_sandbox_has_it(tmp_path):
    from harness.run.workspace import prepare_workspace, role_boundary

    tiny = load_task(REPO / "tasks" / "published" / "tiny-net")
    assert command_workdir(tiny) == "/app"
    ws = prepare_workspace(tiny, tmp_path / "ws")
    assert role_boundary(tiny, ws, name="m", write_candidate=True, side="candidate", audit_log=None).workdir == "/app"
    own = load_task(REPO / "tasks" / "t2j-mini" / "mlp-train")
    assert command_workdir(own) is None
    copy = "FROM a\nCOPY torch_orig /app/torch_orig\n"
    inside = make_task(tmp_path / "in", dockerfile=copy + "WORKDIR /app/torch_orig/net\n")
    assert command_workdir(load_task(inside)) == "/app/torch_orig/net"
    task = load_task(make_task(tmp_path / "no", dockerfile=copy + "WORKDIR /workspace\n"))
    assert command_workdir(task) is None
    assert task.environment.notes[-1] == (
        "WORKDIR /workspace: nothing is laid out there; commands start in /app/jax_repo instead"
    )
    assert command_workdir(load_task(make_task(tmp_path / "unset", dockerfile=copy))) is None


@needs_engine
def test_docker_builds_the_image_and_every_container_of_the_task_runs_on_it(tmp_path, capsys):
    from ground.sandboxes.registry import make_sandbox
    from harness.run.workspace import prepare_workspace, role_boundary

    root = make_task(tmp_path / "t", dockerfile=BUILT)
    copy_shell(root / "environment" / "shell")
    (root / "tests" / "test.sh").write_text(REWARD_IF_BUILT)
    (tmp_path / "cand").mkdir()
    out = tmp_path / "grade.json"
    grade = ["grade", "--task", str(root), "--candidate", str(tmp_path / "cand"), "--out", str(out)]
    assert main(grade) == 2  # without docker the RUN is refused
    assert "Dockerfile:3: RUN" in capsys.readouterr().err
    assert main([*grade, "--sandbox", "docker"]) == 0
    assert json.loads(out.read_text())["reward"] == 1.0  # the grader's container saw what the RUN wrote
    err = capsys.readouterr().err
    assert err.count("note: Dockerfile:3: RUN honoured in twin-task:") == 1
    task = load_task_for_sandbox(root, "docker")  # the image (reused) honours the RUN
    assert task.image is not None and task.image.startswith("twin-task:")
    ws = prepare_workspace(task, tmp_path / "ws")
    boundary = role_boundary(task, ws, name="migrator", write_candidate=True, side="candidate", audit_log=None)
    sandbox = make_sandbox("docker", boundary)
    try:
        result = sandbox.exec("pwd; cat from_run.txt; ls /tests", timeout_s=60)
    finally:
        sandbox.close()
    assert result.stdout.splitlines() == ["/app", "honoured"], result.stdout + result.stderr


@needs_engine
def test_an_image_that_cannot_be_built_falls_back_in_one_line(tmp_path):
    make_task(tmp_path / "t", dockerfile="FROM twin-test-absent:none\nCOPY torch_orig /app/torch_orig\n")
    lines: list[str] = []
    task = load_task_for_sandbox(tmp_path / "t", "docker", say=lines.append)
    assert task.environment is not None and task.settings.source_mount == "/app/torch_orig"
    failed = [line for line in lines if "image was not built" in line]
    assert len(failed) == 1 and "FROM twin-test-absent:none: " in failed[0] and "\n" not in failed[0]
    make_task(tmp_path / "r", dockerfile="FROM twin-test-absent:none\nRUN make\nCOPY torch_orig /app/torch_orig\n")
    with pytest.raises(RunRefused, match="task r: Dockerfile:2: RUN"):
        load_task_for_sandbox(tmp_path / "r", "docker", say=lines.append)
    assert len([line for line in lines if "image was not built" in line]) == 2


def test_the_image_is_a_field_of_the_task_and_every_boundary_of_it_carries_it(tmp_path, monkeypatch):
    """Under docker the built image is the loaded task's, passed to each boundary; nothing remembers it."""
    from benchmark_adapter.grading.grader import grader_boundary
    from ground.isolation import probe_boundary, solve_boundary
    from harness.run.workspace import prepare_workspace, role_boundary
    from task_model import loader
    from task_model.layout import task_layout

    builds: list[tuple[Path, list[Path], list[str]]] = []

    def build(context, *, hidden, laid_out):
        builds.append((context, hidden, laid_out))
        return "twin-task:fake"

    monkeypatch.setattr(loader, "build_task_image", build)
    root = make_task(tmp_path / "t", dockerfile="FROM a\nRUN make all\nCOPY torch_orig /app/torch_orig\nWORKDIR /srv\n")
    lines: list[str] = []
    task = load_task_for_sandbox(root, "docker", say=lines.append)
    assert task.image == "twin-task:fake"
    assert builds == [(root.resolve() / "environment", task.hidden_roots, ["/app/torch_orig"])]
    assert "note: Dockerfile:2: RUN honoured in twin-task:fake" in lines  # the image honours it: not refused
    assert command_workdir(task) == "/srv"  # the image has its WORKDIR
    ws = prepare_workspace(task, tmp_path / "ws")
    layout = task_layout(task, ws.candidate)
    boundaries = [
        role_boundary(task, ws, name="migrator", write_candidate=True, side="candidate", audit_log=None),
        grader_boundary(task, ws.candidate, tmp_path / "logs", audit_log=None),
        probe_boundary(layout, side="reference", work=tmp_path / "w", given=tmp_path / "g", audit_log=None,
                       env={}, wall_s=9),
        solve_boundary(layout, solution=tmp_path / "solution", workdir=None, wall_s=9),
    ]
    assert [b.image for b in boundaries] == ["twin-task:fake"] * 4

    with pytest.raises(RunRefused, match="Dockerfile:2: RUN `make all` cannot run"):
        load_task_for_sandbox(root, "bwrap", say=lines.append)  # another sandbox: no image, and no memory of one
    assert len(builds) == 1
    plain = load_task(root, overrides={"ignore_run": "true"})
    assert plain.image is None
    assert role_boundary(plain, ws, name="m", write_candidate=True, side="candidate", audit_log=None).image is None


def test_twins_own_layout_builds_no_image_under_docker(monkeypatch):
    from task_model import loader

    monkeypatch.setattr(loader, "build_task_image", lambda *a, **k: pytest.fail("built an image"))
    task = load_task_for_sandbox(REPO / "tasks" / "t2j-mini" / "mlp-train", "docker", say=pytest.fail)
    assert task.image is None and task.environment is None
