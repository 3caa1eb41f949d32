"""The original's reference environment in the sandboxes: the reference side and the grader see it, nothing else."""

from __future__ import annotations

import sys

import pytest

from ground import isolation
from ground.isolation import Layout, grader_boundary, probe_boundary, role_boundary, solve_boundary
from ground.sandboxes.bwrap import BwrapSandbox
from tests.conftest import requires_bwrap


@pytest.fixture()
def layout(tmp_path):
    for name in ("cand", "src", "task/tests", "task/solution"):
        (tmp_path / name).mkdir(parents=True)
    return Layout(
        candidate=tmp_path / "cand",
        source=tmp_path / "src",
        hidden=[tmp_path / "task" / "tests", tmp_path / "task" / "solution"],
    )


def test_only_the_reference_side_and_the_grader_see_the_reference_environment(layout, tmp_path):
    site = tmp_path / "env" / "site-packages"
    site.mkdir(parents=True)
    layout = layout.model_copy(update={"reference_site": site})
    inside = isolation.REFERENCE_SITE

    def sees(boundary) -> bool:
        mounted = [m for m in boundary.mounts if m.host == site]
        if mounted:
            assert [(m.inside, m.writable) for m in mounted] == [(inside, False)]
            assert boundary.env["PYTHONPATH"] == inside
        else:
            assert "PYTHONPATH" not in boundary.env
        return bool(mounted)

    probe = dict(work=tmp_path / "w", given=tmp_path / "g", audit_log=None, env={"X": "1"}, wall_s=5)
    assert sees(probe_boundary(layout, side="reference", **probe))
    assert not sees(probe_boundary(layout, side="candidate", **probe))
    tests = tmp_path / "task" / "tests"
    assert sees(grader_boundary(layout, tests=tests, logs=tmp_path / "l", audit_log=None, wall_s=9))
    for side, seen in (("reference", True), ("candidate", False)):
        assert sees(role_boundary(layout, name="r", write_candidate=False, side=side, audit_log=None)) is seen
    assert not sees(solve_boundary(layout, solution=tmp_path / "task" / "solution", workdir=None, wall_s=7))
    unisolated = probe_boundary(layout, side="reference", isolated=False, **probe)
    assert unisolated.env["PYTHONPATH"] == str(site) and unisolated.env["X"] == "1"


@requires_bwrap
@pytest.mark.bwrap
def test_the_reference_side_imports_from_the_reference_environment_and_the_candidate_side_cannot(layout, tmp_path):
    site = tmp_path / "env" / "site-packages"
    (site / "only_in_the_reference_env").mkdir(parents=True)
    (site / "only_in_the_reference_env" / "__init__.py").write_text("VALUE = 42\n")
    (site / "zz_runs_at_start.pth").write_text("import os; os.mkdir('/probe/pth-ran')\n")
    layout = layout.model_copy(update={"reference_site": site})
    code = "import only_in_the_reference_env as m, os; print(m.VALUE, os.path.exists('/probe/pth-ran'))"
    for side, expected in (("reference", "42 False"), ("candidate", "ModuleNotFoundError")):
        work, given = tmp_path / side / "work", tmp_path / side / "given"
        for path in (work, given):
            path.mkdir(parents=True)
            path.chmod(0o777)
        boundary = probe_boundary(layout, side=side, work=work, given=given, audit_log=None, env={}, wall_s=60)
        box = BwrapSandbox(boundary)
        try:
            result = box.exec([sys.executable, "-c", code])
        finally:
            box.close()
        assert expected in result.stdout + result.stderr, (side, result)
