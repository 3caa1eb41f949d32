"""The isolation policy module: one place builds every boundary, and it sits on the ground floor."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from ground import host_dirs, isolation
from ground.isolation import Layout, grader_boundary, probe_boundary, role_boundary, solve_boundary

MODULE = Path(isolation.__file__)


def test_policy_module_imports_nothing_above_the_ground_floor():
    tree = ast.parse(MODULE.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    ours = {
        name
        for name in imported
        if name.split(".")[0]
        in {"ground", "task_model", "harness", "roles", "probes", "benchmark_adapter", "evidence_store"}
    }
    assert ours <= {"ground.boundary", "ground.host_dirs", "ground.views"}, ours


@pytest.fixture()
def layout(tmp_path):
    for name in ("cand", "src", "assets", "task/tests", "task/solution"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "task" / "task.toml").write_text("")
    return Layout(
        candidate=tmp_path / "cand",
        source=tmp_path / "src",
        assets=tmp_path / "assets",
        hidden=[tmp_path / "task" / "tests", tmp_path / "task" / "solution", tmp_path / "task" / "task.toml"],
    )


def _inside(boundary) -> dict[str, bool]:
    return {m.inside: m.writable for m in boundary.mounts}


@pytest.mark.parametrize("writer", [True, False])
def test_role_boundary(layout, writer):
    b = role_boundary(layout, name="r", write_candidate=writer, side="candidate", audit_log=None)
    mounts = _inside(b)
    assert mounts["/app"] is writer and mounts["/source"] is False and mounts["/assets"] is False
    assert "/etc" in mounts and not b.nested_sandbox and b.hidden_packages == ["torch"]
    assert [m for m in b.mounts if m.writable] == ([m for m in b.mounts if m.inside == "/app"] if writer else [])


@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_probe_sides_share_no_directory(layout, tmp_path, side):
    work, given = tmp_path / side / "work", tmp_path / side / "given"
    b = probe_boundary(layout, side=side, work=work, given=given, audit_log=None, env={}, wall_s=5)
    mounts = _inside(b)
    assert mounts["/probe"] is True and mounts["/probe-given"] is False
    assert ("/source" in mounts) == (side == "reference") and ("/app" in mounts) == (side == "candidate")
    other = "candidate" if side == "reference" else "reference"
    hosts = [m.host for m in b.mounts]
    assert not any(str(tmp_path / other) in str(h) for h in hosts)
    assert "/etc" in mounts  # the same /etc snapshot as the roles'


def test_grader_boundary_writes_only_logs_and_may_nest(layout, tmp_path):
    b = grader_boundary(layout, tests=tmp_path / "task" / "tests", logs=tmp_path / "logs", audit_log=None, wall_s=9)
    assert [m.inside for m in b.mounts if m.writable] == ["/logs/verifier"]
    assert b.nested_sandbox and b.limits.wall_s == 9 and b.hidden_packages == ["torch"]
    assert not any(h == tmp_path / "task" / "tests" for h in b.hidden)


def test_solve_boundary_sees_the_solution_never_the_tests(layout, tmp_path):
    solution = tmp_path / "task" / "solution"
    b = solve_boundary(layout, solution=solution, workdir=None, wall_s=7)
    mounts = _inside(b)
    assert [m.inside for m in b.mounts if m.writable] == ["/app"] and mounts["/solution"] is False
    assert tmp_path / "task" / "tests" in b.hidden and solution not in b.hidden
    assert not b.network and b.hidden_packages == ["torch"] and b.workdir == "/app" and b.limits.wall_s == 7


def test_scratch_dirs_are_reachable_by_the_sandbox_uid():
    path = isolation.scratch_dir("t-")
    try:
        assert isolation.reachable(path / "x")
    finally:
        path.rmdir()


def test_a_stage_directory_another_user_owns_is_left_alone_for_a_per_user_one(tmp_path, monkeypatch):
    """A non-root twin where root made the shared stage: no chmod of root's directory, its own beside it."""
    shared = tmp_path / "twin-stage"
    shared.mkdir(mode=0o755)
    me = shared.stat().st_uid + 4242  # a user who does not own the shared one
    own = shared.with_name(f"twin-stage-{me}")
    monkeypatch.delenv("TWIN_STAGE_DIR", raising=False)
    monkeypatch.setattr(host_dirs, "STAGE_DIR", str(shared))
    monkeypatch.setattr(host_dirs.os, "geteuid", lambda: me)
    real_fstat, chmods = host_dirs.os.fstat, []

    def fstat(fd):
        st = real_fstat(fd)
        if os.readlink(f"/proc/self/fd/{fd}") == str(own):  # made by `me`
            return type(st)((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, me, *st[5:]))
        return st

    monkeypatch.setattr(host_dirs.os, "fstat", fstat)
    monkeypatch.setattr(
        host_dirs.os, "fchmod", lambda fd, mode: chmods.append((os.readlink(f"/proc/self/fd/{fd}"), mode))
    )
    assert isolation.stage_root() == own
    assert chmods in ([(str(own), 0o711)], [])  # made 0711 already, or set so
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755


def test_a_per_user_stage_directory_someone_else_made_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "twin-stage"
    shared.mkdir()
    (tmp_path / "twin-stage-4242").mkdir()
    monkeypatch.delenv("TWIN_STAGE_DIR", raising=False)
    monkeypatch.setattr(host_dirs, "STAGE_DIR", str(shared))
    monkeypatch.setattr(host_dirs.os, "geteuid", lambda: 4242)
    with pytest.raises(isolation.IsolationError, match="twin-stage-4242 belongs to uid 0: .*remove"):
        isolation.stage_root()
