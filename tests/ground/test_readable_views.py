"""Readable views: a task's 0600/0700 files reach the sandbox uid as a copy, hidden paths never."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ground import views
from ground.boundary import Mount
from ground.isolation import SANDBOX_GID, SANDBOX_UID, Layout, grader_boundary

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="views are made only when twin runs as root")


def _tree(base: Path) -> Path:
    tree = base / "tests"
    (tree / "refs").mkdir(parents=True)
    (tree / "test.sh").write_text("#!/bin/sh\n")
    (tree / "test.sh").chmod(0o755)
    (tree / "refs.npz").write_bytes(b"secret-refs")
    (tree / "refs.npz").chmod(0o600)
    (tree / "refs" / "a.json").write_text("{}")
    (tree / "refs").chmod(0o700)
    return tree


def _view(tree: Path, cache: Path, hidden=()) -> Path:
    return views.readable_view(tree, list(hidden), cache=cache, uid=SANDBOX_UID, gid=SANDBOX_GID)


@root_only
def test_unreadable_tree_is_copied_readable_to_the_sandbox_group_only(tmp_path):
    tree = _tree(tmp_path)
    view = _view(tree, tmp_path / "cache")
    assert view != tree and (tmp_path / "cache" / "views") in view.parents
    assert (view / "refs.npz").read_bytes() == b"secret-refs"
    for path in [view, *view.rglob("*")]:
        st = os.lstat(path)
        is_dir = stat.S_ISDIR(st.st_mode)
        assert views.readable_by(st, SANDBOX_UID, SANDBOX_GID, directory=is_dir), path
        assert st.st_uid == 0 and st.st_gid == SANDBOX_GID, path  # the sandbox cannot change it
        assert st.st_mode & 0o007 == 0 and st.st_mode & 0o020 == 0, path  # others nothing, group no write
    assert os.stat(view / "test.sh").st_mode & 0o010  # executable stays executable
    assert stat.S_IMODE(os.stat(tree / "refs.npz").st_mode) == 0o600  # the task itself is untouched


@root_only
def test_view_is_reused_until_the_tree_changes(tmp_path):
    tree = _tree(tmp_path)
    first = _view(tree, tmp_path / "cache")
    assert _view(tree, tmp_path / "cache") == first
    (tree / "refs.npz").write_bytes(b"new-refs!!!!")
    os.utime(tree / "refs.npz", ns=(1, 1))
    second = _view(tree, tmp_path / "cache")
    assert second != first and (second / "refs.npz").read_bytes() == b"new-refs!!!!"


@root_only
def test_hidden_paths_inside_are_left_out_of_the_copy(tmp_path):
    tree = _tree(tmp_path)
    view = _view(tree, tmp_path / "cache", hidden=[tree / "refs"])
    assert (view / "refs.npz").is_file() and not (view / "refs").exists()


@root_only
def test_readable_tree_is_mounted_as_it_is(tmp_path):
    tree = _tree(tmp_path)
    (tree / "refs.npz").chmod(0o644)
    (tree / "refs").chmod(0o755)
    assert _view(tree, tmp_path / "cache") == tree.resolve()
    assert not (tmp_path / "cache").exists()


def test_nothing_changes_when_twin_is_not_root(tmp_path, monkeypatch):
    tree = _tree(tmp_path)
    monkeypatch.setattr(views.os, "geteuid", lambda: 1000)
    assert _view(tree, tmp_path / "cache") == tree.resolve()


@root_only
def test_single_laid_out_file_gets_a_view(tmp_path):
    tree = _tree(tmp_path)
    view = _view(tree / "refs.npz", tmp_path / "cache")
    assert view.name == "refs.npz" and view.read_bytes() == b"secret-refs"
    assert views.readable_by(os.stat(view), SANDBOX_UID, SANDBOX_GID, directory=False)


@pytest.mark.heavy  # a whole grade
@root_only
def test_grader_sees_views_of_what_the_task_gives_never_of_the_candidate(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    tests = _tree(tmp_path)
    cand, src = tmp_path / "cand", tmp_path / "src"
    cand.mkdir()
    (cand / "private.txt").write_text("x")
    (cand / "private.txt").chmod(0o600)
    src.mkdir(mode=0o700)
    (src / "model.py").write_text("")
    layout = Layout(candidate=cand, source=src, hidden=[tests])
    b = grader_boundary(layout, tests=tests, logs=tmp_path / "logs", audit_log=None, wall_s=10)
    by_inside = {m.inside: m.host for m in b.mounts}
    views_dir = (tmp_path / "cache" / "views").resolve()
    assert views_dir in by_inside["/tests"].parents and views_dir in by_inside["/source"].parents
    assert by_inside["/app"] == cand.resolve()  # the candidate keeps its own modes


def test_readable_mounts_leaves_writable_roots_alone(tmp_path, monkeypatch):
    tree = _tree(tmp_path)
    mounts = [Mount(host=tree, inside="/w", writable=True)]
    assert views.readable_mounts(mounts, [], cache=tmp_path / "c", uid=SANDBOX_UID, gid=SANDBOX_GID) == mounts


@pytest.mark.heavy  # a scripted run and a grade
@root_only
def test_roles_probes_and_solve_see_views_of_the_original_and_the_assets(tmp_path, monkeypatch):
    from ground.isolation import probe_boundary, role_boundary, solve_boundary

    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    src, assets, cand, solution = (tmp_path / n for n in ("src", "assets", "cand", "solution"))
    for folder in (src, assets, cand, solution):
        folder.mkdir(mode=0o700)
        (folder / "f.bin").write_bytes(b"x")
        (folder / "f.bin").chmod(0o600)
    layout = Layout(candidate=cand, source=src, assets=assets)
    views_dir = (tmp_path / "cache" / "views").resolve()
    role = role_boundary(layout, name="r", write_candidate=True, side="candidate", audit_log=None)
    ref = probe_boundary(layout, side="reference", work=tmp_path / "w", given=tmp_path / "g", audit_log=None,
                         env={}, wall_s=5)  # fmt: skip
    cand_side = probe_boundary(layout, side="candidate", work=tmp_path / "w", given=tmp_path / "g", audit_log=None,
                               env={}, wall_s=5)  # fmt: skip
    solve = solve_boundary(layout, solution=solution, workdir=None, wall_s=5)
    for boundary, given in ((role, ["/source", "/assets"]), (ref, ["/source", "/assets"]),
                            (solve, ["/source", "/assets", "/solution"])):  # fmt: skip
        hosts = {m.inside: m.host for m in boundary.mounts}
        assert all(views_dir in hosts[inside].parents for inside in given), (boundary.name, hosts)
        assert hosts.get("/app", cand.resolve()) == cand.resolve()  # the candidate keeps its modes
    assert {m.inside: m.host for m in cand_side.mounts}["/app"] == cand.resolve()


def _prefix(base: Path, *, venv: bool) -> Path:
    site = base / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "pkg.py").write_text("x = 1\n")
    if venv:
        (base / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    return base


@pytest.mark.parametrize("base_inside", [False, True], ids=["system-base", "base-under-root"])
def test_interpreter_copy_of_a_venv_whose_base_lies_elsewhere_or_inside(tmp_path, monkeypatch, base_inside):
    """A venv made from the system's Python (base under /usr) is copied whole; a base
    prefix that is itself copied (pyenv under /root) leaves its own site-packages empty."""
    venv = _prefix(tmp_path / "venv", venv=True)
    base = _prefix(tmp_path / "base", venv=False)
    root = base if base_inside else venv
    monkeypatch.setattr(views.sys, "prefix", str(venv))
    monkeypatch.setattr(views.sys, "base_prefix", str(base))
    monkeypatch.setattr(views.sys, "version_info", (3, 11, 2))
    copy = views.interpreter_copy(root, cache=tmp_path / "cache")
    assert (tmp_path / "cache" / "roots") in copy.parents
    site = copy / "lib" / "python3.11" / "site-packages"
    assert site.is_dir()
    assert [p.name for p in site.iterdir()] == ([] if base_inside else ["pkg.py"])
    assert stat.S_IMODE(copy.stat().st_mode) == 0o755


def test_a_failed_interpreter_copy_leaves_nothing_behind(tmp_path, monkeypatch):
    venv = _prefix(tmp_path / "venv", venv=True)

    def full_disk(src, dst, **_kwargs):
        Path(dst).mkdir(parents=True)
        (Path(dst) / "half-written").write_bytes(b"x" * 1024)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(views.shutil, "copytree", full_disk)
    with pytest.raises(OSError, match="No space left"):
        views.interpreter_copy(venv, cache=tmp_path / "cache")
    assert list((tmp_path / "cache" / "roots").iterdir()) == []
