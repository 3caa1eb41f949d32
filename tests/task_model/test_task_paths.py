"""Task paths are contained: a task cannot hand the agent files outside it, or its own hidden files."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.app import main
from task_model.loader import load_task
from task_model.model import TaskError


def make_task(root: Path, twin: str = "") -> Path:
    task = root / "task"
    (task / "environment" / "source").mkdir(parents=True)
    (task / "environment" / "assets").mkdir()
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n")
    (task / "solution").mkdir()
    (task / "instruction.md").write_text("Do it.\n")
    (task / "task.toml").write_text('version = "1.0"\n[metadata.twin]\n' + twin)
    (root / "outside").mkdir()
    (task / "environment" / "out_link").symlink_to(root / "outside")
    (task / "environment" / "tests_link").symlink_to(task / "tests")
    return task


@pytest.mark.parametrize(
    "twin, message",
    [
        ('source_dir = "/etc"\n', "must be a path relative"),
        ('source_dir = "environment/../../outside"\n', "must not climb out"),
        ('source_dir = "environment/out_link"\n', "resolves outside"),
        ('source_dir = "."\n', "must not be, contain or lie inside the task's tests"),
        ('source_dir = ""\n', "must not be, contain or lie inside"),
        ('source_dir = "tests"\n', "inside the task's tests"),
        ('source_dir = "environment/tests_link"\n', "inside the task's tests"),
        ('assets_dir = "solution"\n', "inside the task's solution"),
        ('assets_dir = "task.toml"\n', "inside the task's task.toml"),
        ('assets_dir = "/tmp"\n', "must be a path relative"),
        ('candidate_mount = "/"\n', "absolute path other than /"),
    ],
)
def test_uncontained_task_paths_are_one_clear_error_with_exit_2(tmp_path, capsys, twin, message):
    task = make_task(tmp_path, twin)
    with pytest.raises(TaskError, match=message):
        load_task(task)
    runs = str(tmp_path / "runs")
    code = main(["migrate", "--task", str(task), "--model", "scripted:/nonexistent", "--runs-dir", runs])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message.split("'")[0] in " ".join(err.split()) and len(err.splitlines()) <= 3
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_contained_paths_load(tmp_path):
    task = load_task(make_task(tmp_path, 'source_dir = "environment/source"\n'))
    assert task.source_dir == task.root / "environment" / "source"
