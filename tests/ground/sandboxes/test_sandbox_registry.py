"""Choosing a sandbox by name, and the explicitly unsafe `none` sandbox."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from ground.boundary import Boundary, BoundaryViolation, Limits, Mount
from ground.sandbox import SandboxError
from ground.sandboxes.registry import available_sandboxes, make_sandbox


def boundary(tmp_path: Path) -> Boundary:
    (tmp_path / "cand").mkdir(exist_ok=True)
    return Boundary(
        name="t",
        mounts=[Mount(host=tmp_path / "cand", inside="/app", writable=True)],
        workdir="/app",
        limits=Limits(wall_s=10, output_bytes=1000),
    )


def test_unknown_kind_lists_the_known_ones(tmp_path):
    with pytest.raises(SandboxError, match="auto, bwrap, docker, none"):
        make_sandbox("chroot", boundary(tmp_path))


def test_auto_without_bwrap_points_at_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr("ground.sandboxes.registry.bwrap_path", lambda: None)
    with pytest.raises(SandboxError, match="install bubblewrap.*--sandbox none"):
        make_sandbox("auto", boundary(tmp_path))
    assert "bwrap" not in available_sandboxes() and "none" in available_sandboxes()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_auto_picks_bwrap(tmp_path):
    from ground.sandboxes.bwrap import BwrapSandbox

    assert isinstance(make_sandbox("auto", boundary(tmp_path)), BwrapSandbox)
    assert available_sandboxes()[0] == "bwrap"


def test_none_runs_on_the_host_and_warns_every_time(tmp_path, caplog):
    sandbox = make_sandbox("none", boundary(tmp_path))
    with caplog.at_level(logging.WARNING):
        first = sandbox.exec("pwd; echo $HOME")
        sandbox.exec(["true"])
    assert first.stdout.split() == [str((tmp_path / "cand").resolve()), "/tmp"]
    warnings = [r for r in caplog.records if "nothing is isolated" in r.getMessage()]
    assert len(warnings) == 2


def test_none_still_checks_file_operations(tmp_path):
    sandbox = make_sandbox("none", boundary(tmp_path))
    sandbox.write_file("/app/a.txt", "x")
    assert (tmp_path / "cand" / "a.txt").read_text() == "x"
    with pytest.raises(BoundaryViolation):
        sandbox.read_file(str(tmp_path / "cand" / "a.txt"))


def test_none_kills_background_processes_and_times_out(tmp_path):
    sandbox = make_sandbox("none", boundary(tmp_path))
    marker = tmp_path / "cand" / "late"
    sandbox.exec(f"(sleep 1; touch {marker}) > /dev/null 2>&1 &")
    result = sandbox.exec("sleep 20", timeout_s=0.5)
    assert result.timed_out and result.returncode == 124
    import time

    time.sleep(1.5)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["bwrap", "docker", "none"])
def test_each_name_builds_its_registered_class(tmp_path, kind):
    from ground.sandboxes.registry import KNOWN, SANDBOXES

    assert KNOWN == ("auto", *SANDBOXES)
    if kind == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    if kind == "docker":
        pytest.importorskip("docker")
    try:
        sandbox = make_sandbox(kind, boundary(tmp_path))
    except SandboxError:
        pytest.skip(f"{kind} cannot run here")
    assert type(sandbox) is SANDBOXES[kind]
