"""The workspace: a source copy without history, a kept candidate, the boundaries over them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.grader import grader_boundary
from ground.isolation import python_mounts
from harness.run.workspace import (
    WorkspaceError,
    prepare_workspace,
    role_boundary,
)
from task_model.loader import load_task
from tests.harness.redteam.conftest import SECRET, make_task


@pytest.fixture
def task(tmp_path: Path):
    root = make_task(tmp_path / "task")
    source = root / "environment" / "source"
    (source / "inside_link").symlink_to("pkg/__init__.py")
    (source / "outside_link").symlink_to(root / "tests" / "refs" / "secret.txt")
    os.link(root / "tests" / "refs" / "secret.txt", source / "hard_alias")
    return load_task(root)


def test_source_is_copied_without_history_or_links_out(task, tmp_path):
    ws = prepare_workspace(task, tmp_path / "ws")
    names = {p.name for p in ws.source.rglob("*")}
    assert ".git" not in names and ".gitmodules" not in names and "packed-refs" not in names
    assert (ws.source / "pkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert (ws.source / "inside_link").is_symlink()
    assert (
        not (ws.source / "outside_link").exists() and not (ws.source / "outside_link").is_symlink()
    )
    assert os.stat(ws.source / "hard_alias").st_nlink == 1, "copies get fresh inodes"
    assert not any(SECRET in p.read_text() for p in ws.source.rglob("*.py"))
    assert ws.assets == task.assets_dir and ws.candidate.is_dir()


def test_prepare_is_idempotent_and_keeps_the_candidate(task, tmp_path):
    ws = prepare_workspace(task, tmp_path / "ws")
    (ws.candidate / "model.py").write_text("kept")
    (task.source_dir / "pkg" / "late.py").write_text("x")
    again = prepare_workspace(task, tmp_path / "ws")
    assert again == ws
    assert (ws.candidate / "model.py").read_text() == "kept"
    assert not (ws.source / "pkg" / "late.py").exists(), "a complete copy is reused"


def test_interrupted_copy_is_redone(task, tmp_path):
    ws = prepare_workspace(task, tmp_path / "ws")
    (tmp_path / "ws" / ".source-complete").unlink()
    (ws.source / "pkg" / "__init__.py").unlink()
    prepare_workspace(task, tmp_path / "ws")
    assert (ws.source / "pkg" / "__init__.py").exists()


def test_bad_root_is_one_error(task, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(WorkspaceError, match="not a directory"):
        prepare_workspace(task, tmp_path / "file")


def test_python_mounts_cover_the_interpreter_but_not_the_repository(repo_root):
    mounts = python_mounts()
    insides = {m.inside for m in mounts}
    assert {"/usr", sys.prefix} <= insides
    assert all(not m.writable for m in mounts)
    assert str(repo_root) not in insides
    etc = next(m.host for m in mounts if m.inside == "/etc")
    assert etc != Path("/etc") and (etc / "passwd").is_file()
    assert not (etc / "shadow").exists() and not (etc / "ssl" / "private").exists()


def test_role_boundaries(task, tmp_path):
    ws = prepare_workspace(task, tmp_path / "run" / "workspace")
    audit = tmp_path / "run" / "audit.log"
    (tmp_path / "run" / "evidence.sqlite").write_text("")
    migrator = role_boundary(
        task, ws, name="migrator", write_candidate=True, side="candidate", audit_log=audit
    )
    by_inside = {m.inside: m for m in migrator.mounts}
    assert by_inside["/app"].writable and not by_inside["/source"].writable
    assert by_inside["/source"].host == ws.source and by_inside["/assets"].host == ws.assets
    assert migrator.hidden_packages == ["torch"] and migrator.workdir == "/app"
    assert not migrator.network
    hidden = set(migrator.hidden)
    assert (task.root / "tests").resolve() in hidden and (
        task.root / "solution"
    ).resolve() in hidden
    assert (tmp_path / "run" / "evidence.sqlite").resolve() in hidden
    assert audit.resolve() in hidden
    reference = role_boundary(
        task,
        ws,
        name="verifier:reference",
        write_candidate=False,
        side="reference",
        audit_log=audit,
    )
    assert reference.hidden_packages == [] and not any(m.writable for m in reference.mounts)


def test_grader_boundary(task, tmp_path):
    candidate = tmp_path / "cand"
    candidate.mkdir()
    grader = grader_boundary(task, candidate, tmp_path / "logs", audit_log=None)
    by_inside = {m.inside: m for m in grader.mounts}
    assert [m.inside for m in grader.mounts if m.writable] == ["/logs/verifier"]
    tests = by_inside["/tests"].host  # as root, a copy closed to all but root and the sandbox's group
    assert tests == task.tests_dir.resolve() if os.geteuid() != 0 else "views" in tests.parts
    assert sorted(p.name for p in tests.iterdir()) == sorted(p.name for p in task.tests_dir.iterdir())
    assert by_inside["/app"].host == candidate.resolve() and "/source" not in by_inside
    assert (task.root / "solution").resolve() in grader.hidden
    assert grader.hidden_packages == ["torch"] and grader.nested_sandbox and not grader.network
    assert (tmp_path / "logs").is_dir()
