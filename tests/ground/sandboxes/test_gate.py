"""Limits set on a bubblewrap sandbox while bubblewrap holds it: applied, refused, never skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ground.boundary import Boundary, Limits, Mount
from ground.isolation import python_mounts, scratch_dir
from ground.sandbox import SandboxError
from ground.sandboxes import gate
from ground.sandboxes.bwrap import BwrapSandbox
from ground.sandboxes.disk import DISK_RETURNCODE
from ground.sandboxes.gate import LaunchGate, Limiter, NoReport
from ground.sandboxes.process import run_limited
from tests.conftest import requires_bwrap

LIMITS = Limits(wall_s=30, memory_mb=1536, max_procs=23, disk_mb=40, output_bytes=20000)


@pytest.fixture
def candidate() -> Path:
    # like a run directory: a place the sandbox uid can pass through when twin is root
    path = Path(scratch_dir("gate-test-")) / "candidate"
    path.mkdir()
    os.chmod(path.parent, 0o711)
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture
def sandbox(candidate: Path) -> BwrapSandbox:
    box = BwrapSandbox(
        Boundary(
            name="gate-test",
            mounts=[*python_mounts(), Mount(host=candidate, inside="/app", writable=True)],
            workdir="/app",
            limits=LIMITS,
        )
    )
    yield box
    box.close()


def limits_inside(sandbox: BwrapSandbox) -> dict[str, str]:
    text = sandbox.exec(["cat", "/proc/self/limits"]).stdout
    rows = {}
    for line in text.splitlines()[1:]:
        name, soft = line[:26].strip(), line[26:47].strip()
        rows[name] = soft
    return rows


@requires_bwrap
def test_the_command_runs_under_every_limit(sandbox):
    rows = limits_inside(sandbox)
    assert rows["Max address space"] == str(LIMITS.memory_mb << 20)
    assert rows["Max file size"] == str(LIMITS.file_bytes())
    assert rows["Max core file size"] == "0"
    assert rows["Max processes"] == str(LIMITS.max_procs)


@requires_bwrap
def test_no_descriptor_of_the_gate_reaches_the_command(sandbox):
    listed = sandbox.exec("ls /proc/self/fd").stdout.split()
    assert sorted(listed, key=int) == ["0", "1", "2", "3"]  # 3: ls's own directory


@requires_bwrap
def test_a_file_over_the_cap_stops_the_command(sandbox):
    code = f"dd if=/dev/zero of=/app/big bs=1M count={LIMITS.disk_mb + 5} 2>/dev/null"
    result = sandbox.exec(code)
    assert result.returncode == DISK_RETURNCODE and result.exceeded


@requires_bwrap
def test_no_time_left_for_the_report_is_a_time_out_and_nothing_runs(sandbox, candidate):
    result = sandbox.exec(["touch", "/app/ran"], timeout_s=0.0005)
    assert result.timed_out and result.returncode == 124
    time.sleep(0.2)
    assert not (candidate / "ran").exists()


@requires_bwrap
def test_a_bubblewrap_that_fails_before_its_sandbox_reports_its_own_error():
    held = LaunchGate()
    try:
        argv = [shutil.which("bwrap"), "--no-such-option", *held.options(), "true"]
        result = run_limited(argv, env={"PATH": "/usr/bin:/bin"}, cwd="/", limits=LIMITS, gate=held)
    finally:
        held.close()
    assert result.returncode != 0 and "no-such-option" in result.stderr


def started(candidate: Path) -> tuple[LaunchGate, subprocess.Popen]:
    """A bare bubblewrap held at a gate, whose command would leave /ran in `candidate`."""
    held = LaunchGate()
    argv = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--bind", str(candidate), str(candidate)]
    argv += ["--unshare-user", "--unshare-pid", "--die-with-parent", *held.options(), "touch", str(candidate / "ran")]
    proc = subprocess.Popen(argv, pass_fds=held.fds, process_group=0)
    held.started()
    return held, proc


@requires_bwrap
def test_a_sandbox_whose_parent_is_not_the_started_bubblewrap_is_refused(tmp_path):
    candidate = tmp_path / "c"
    candidate.mkdir()
    held, proc = started(candidate)
    try:
        with pytest.raises(SandboxError, match="not bubblewrap's child"):
            held.release(SimpleNamespace(pid=os.getpid()), LIMITS, deadline=time.monotonic() + 30)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        held.close()
    assert not (candidate / "ran").exists()


@requires_bwrap
def test_a_lost_release_leaves_the_sandbox_held_never_unlimited(tmp_path):
    candidate = tmp_path / "c"
    candidate.mkdir()
    held, proc = started(candidate)
    try:
        os.close(held._block_w)  # twin's end gone without a byte, as if twin died
        held._block_w = -1
        time.sleep(0.5)
        assert proc.poll() is None and not (candidate / "ran").exists()
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        held.close()


def test_reports_bubblewrap_can_give():
    with pytest.raises(NoReport):
        gate._child_pid(b"")
    for garbage in (b"{", b'{"child-pid": "7"}', b'{"child-pid": 1}', b"[]"):
        with pytest.raises(SandboxError, match="unreadable"):
            gate._child_pid(garbage)
    assert gate._child_pid(b'{\n    "child-pid": 4242,\n    "cgroup-namespace": 1\n}\n') == 4242


@pytest.mark.skipif(os.geteuid() != 0, reason="the helper is root's way to limit the sandbox uid's processes")
def test_the_helper_limits_only_the_sandbox_uids_processes_and_comes_back_after_dying():
    limiter = Limiter()
    limiter._direct = False  # as where root lacks CAP_SYS_RESOURCE
    values = (1 << 30, 0, 1 << 20, 50)
    target = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
    own = subprocess.Popen(["sleep", "30"])  # root's: out of the helper's reach
    try:
        time.sleep(0.2)
        limiter.apply(target.pid, values)
        limits = Path(f"/proc/{target.pid}/limits").read_text()
        assert "Max processes             50" in limits
        os.kill(limiter.helper_pid(), 9)
        limiter.apply(target.pid, values)  # started again
        with pytest.raises(SandboxError, match="cannot set the sandbox's limits"):
            limiter.apply(own.pid, values)
    finally:
        for proc in (target, own):
            proc.kill()
            proc.wait()
        limiter._stop()


def test_a_process_of_twins_own_uid_is_limited_directly_without_the_helper():
    limiter = Limiter()
    target = subprocess.Popen(["sleep", "30"])
    try:
        limiter.apply(target.pid, (1 << 30, 0, 1 << 20, 50))
        assert "Max file size             1048576" in Path(f"/proc/{target.pid}/limits").read_text()
        assert limiter._direct and limiter.helper_pid() is None
    finally:
        target.kill()
        target.wait()
