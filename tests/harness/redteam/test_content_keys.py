"""What twin keeps by a tree's content is keyed by its content: grader views and the remembered task check.

An edit that keeps every size and modification time (set back with `touch -r`), byte code in
`__pycache__` that a grader's helper import runs, a `tests -> ../shared-grader` link whose target
changes, a file larger than any "hash only small files" limit: each must give a fresh view and a
new task-check key. Each test fails if a stale copy or a remembered pass survives the change.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from benchmark_adapter.grading.check import task_content_hash
from benchmark_adapter.grading.grader import run_grader
from ground import views
from ground.isolation import SANDBOX_GID, SANDBOX_UID
from task_model.loader import load_task
from tests.conftest import docker_engine, requires_bwrap

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="views are made only when twin runs as root")


def same_size_and_time(path: Path, data: bytes) -> None:
    """Rewrite `path` with `data` of the same length, its times set back as they were."""
    st = path.stat()
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns


def make_task(root: Path, *, shared: bool = False) -> Path:
    grader = root.parent / "shared-grader" if shared else root / "tests"
    (grader / "refs").mkdir(parents=True)
    (root / "environment" / "source").mkdir(parents=True)
    (root / "environment" / "source" / "m.py").write_text("x = 1\n")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n')
    (root / "instruction.md").write_text("Migrate.\n")
    (grader / "refs" / "reward.txt").write_text("0.25\n")
    (grader / "test.sh").write_text('cat "$TESTS_DIR/refs/reward.txt" > "$LOGS_DIR/reward.txt"\n')
    if shared:
        (root / "tests").symlink_to(os.path.relpath(grader, root))
    return root


@root_only
@pytest.mark.parametrize("closed", [True, False], ids=["closed", "unreadable"])
def test_a_view_follows_an_edit_that_keeps_size_and_mtime(tmp_path, closed):
    tree = tmp_path / "tests"
    tree.mkdir()
    (tree / "refs.txt").write_text("old reference\n")
    (tree / "refs.txt").chmod(0o600)
    first = views.readable_view(tree, [], cache=tmp_path / "cache", uid=SANDBOX_UID, gid=SANDBOX_GID, closed=closed)
    assert (first / "refs.txt").read_text() == "old reference\n"
    same_size_and_time(tree / "refs.txt", b"new reference\n")
    second = views.readable_view(tree, [], cache=tmp_path / "cache", uid=SANDBOX_UID, gid=SANDBOX_GID, closed=closed)
    assert (second / "refs.txt").read_text() == "new reference\n"


@root_only
def test_a_single_file_view_follows_an_edit_that_keeps_size_and_mtime(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"AAAA")
    path.chmod(0o600)
    first = views.readable_view(path, [], cache=tmp_path / "cache", uid=SANDBOX_UID, gid=SANDBOX_GID)
    same_size_and_time(path, b"BBBB")
    second = views.readable_view(path, [], cache=tmp_path / "cache", uid=SANDBOX_UID, gid=SANDBOX_GID)
    assert first.read_bytes() == b"AAAA" and second.read_bytes() == b"BBBB"


KINDS = [
    pytest.param("bwrap", marks=requires_bwrap),
    pytest.param("docker", marks=[pytest.mark.skipif(not docker_engine(), reason="no engine"), pytest.mark.heavy]),
]


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_the_next_grade_reads_the_reference_as_it_is_now(tmp_path, kind):
    """Through run_grader as root (tests/ is mounted from a closed view): no stale reference."""
    task = load_task(make_task(tmp_path / "task"))
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    assert run_grader(task, candidate, sandbox=kind).reward == 0.25
    same_size_and_time(task.tests_dir / "refs" / "reward.txt", b"0.75\n")
    assert run_grader(task, candidate, sandbox=kind).reward == 0.75


@pytest.mark.parametrize("change", ["pycache", "linked-folder", "large-file"])
def test_the_task_check_key_changes_with_what_the_grader_runs(tmp_path, change):
    root = make_task(tmp_path / "task", shared=change == "linked-folder")
    grader = (root / "tests").resolve()
    (grader / "__pycache__").mkdir()
    (grader / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\x00" * 64)
    (grader / "refs" / "big.npy").write_bytes(b"\x00" * (9 << 20))
    before = task_content_hash(load_task(root))
    target = {
        "pycache": (grader / "__pycache__" / "helper.cpython-311.pyc", b"\x01" * 64),
        "linked-folder": (grader / "refs" / "reward.txt", b"0.99\n"),
        "large-file": (grader / "refs" / "big.npy", b"\x00" * ((9 << 20) - 1) + b"\x01"),
    }[change]
    same_size_and_time(*target)
    after = task_content_hash(load_task(root))
    assert before is not None and after is not None and before != after


def test_the_task_check_key_is_stable_while_nothing_changes(tmp_path):
    root = make_task(tmp_path / "task", shared=True)
    first = task_content_hash(load_task(root))
    copy = tmp_path / "again" / "task"
    shutil.copytree(tmp_path / "shared-grader", tmp_path / "again" / "shared-grader")
    shutil.copytree(root, copy, symlinks=True)
    assert first == task_content_hash(load_task(root)) == task_content_hash(load_task(copy))


def colliding_grader(tests: Path, *, second: bool) -> None:
    """The two grader folders that one digest without lengths or folder lists could not tell apart.

    The first holds `test.sh` and an empty `zz` (graded 0.25: `zz` is there); the second holds only
    `test.sh`, whose bytes end with what the first's `zz` entry adds to such a digest (graded 0.75).
    """
    script = (
        b'#!/bin/bash\nif [ -e "$TESTS_DIR/zz" ]; then r=0.25; else r=0.75; fi\n'
        b'echo $r > "$LOGS_DIR/reward.txt"\nexit 0\n# '
    )
    entry = f"\0zz\0{stat.S_IFREG}:{0o600:o}\0".encode()
    (tests / "test.sh").write_bytes(script + entry if second else script)
    if not second:
        (tests / "zz").write_bytes(b"")
        os.chmod(tests / "zz", 0o600)
    else:
        (tests / "zz").unlink()
    os.chmod(tests / "test.sh", 0o700)


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_two_graders_of_one_stream_are_two_views_and_two_task_keys(tmp_path, kind):
    root = make_task(tmp_path / "task")
    shutil.rmtree(root / "tests" / "refs")
    colliding_grader(root / "tests", second=False)
    task = load_task(root)
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    first_key = task_content_hash(task)
    assert run_grader(task, candidate, sandbox=kind).reward == 0.25
    colliding_grader(root / "tests", second=True)
    assert run_grader(task, candidate, sandbox=kind).reward == 0.75
    assert task_content_hash(load_task(root)) != first_key
