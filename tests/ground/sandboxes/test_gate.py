"""Limits set on a bubblewrap sandbox while bubblewrap holds it: applied, refused, never skipped."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ground.boundary import Boundary, Limits, Mount
from ground.isolation import cache_root, python_mounts, scratch_dir
from ground.sandbox import SandboxError
from ground.sandboxes import gate
from ground.sandboxes.bwrap import BwrapSandbox
from ground.sandboxes.disk import DISK_RETURNCODE
from ground.sandboxes.gate import LaunchGate, Limiter, NoReport
from ground.sandboxes.process import run_limited
from ground.sandboxes.quota import recover_capped
from ground.sandboxes.seccomp import filter_file
from tests.conftest import requires_bwrap

REPO = Path(__file__).resolve().parents[3]

LIMITS = Limits(wall_s=30, memory_mb=1536, max_procs=23, disk_mb=40, output_bytes=20000)


def program() -> bytes:
    return filter_file("strict", cache_root() / "seccomp").read_bytes()


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
    held = LaunchGate(program())
    try:
        argv = [shutil.which("bwrap"), "--no-such-option", *held.options(), "true"]
        result = run_limited(argv, env={"PATH": "/usr/bin:/bin"}, cwd="/", limits=LIMITS, gate=held)
    finally:
        held.close()
    assert result.returncode != 0 and "no-such-option" in result.stderr


def started(tmp_path: Path) -> tuple[LaunchGate, subprocess.Popen, Path]:
    """A bare bubblewrap held at a gate, and the directory where its command would leave `ran`."""
    candidate = tmp_path / "c"
    candidate.mkdir()
    held = LaunchGate(program())
    argv = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--bind", str(candidate), str(candidate)]
    argv += ["--unshare-user", "--unshare-pid", "--die-with-parent", *held.options(), "touch", str(candidate / "ran")]
    proc = subprocess.Popen(argv, pass_fds=held.fds, process_group=0, stderr=subprocess.PIPE)
    held.started()
    return held, proc, candidate


@requires_bwrap
def test_a_sandbox_whose_parent_is_not_the_started_bubblewrap_is_refused(tmp_path):
    held, proc, candidate = started(tmp_path)
    try:
        with pytest.raises(SandboxError, match="not bubblewrap's child"):
            held.release(SimpleNamespace(pid=os.getpid()), LIMITS, deadline=time.monotonic() + 30)
    finally:
        os.killpg(proc.pid, 9)
        proc.communicate()
        held.close()
    assert not (candidate / "ran").exists()


@requires_bwrap
def test_a_sandbox_let_go_without_its_filter_never_runs_and_ends(tmp_path):
    held, proc, candidate = started(tmp_path)
    try:
        held._read_info(time.monotonic() + 30)  # the sandbox is there, held
        held.close()  # twin's end of the filter pipe gone without a byte, as if twin died
        _, stderr = proc.communicate(timeout=20)
    finally:
        held.close()
    assert proc.returncode != 0 and b"PR_SET_SECCOMP" in stderr  # an empty program is refused
    assert not (candidate / "ran").exists()


@requires_bwrap
def test_a_twin_gone_before_the_report_leaves_nothing_behind(tmp_path):
    held, proc, candidate = started(tmp_path)
    held.close()  # twin's ends of both pipes gone at once, before bubblewrap reports: as if twin died
    proc.communicate(timeout=20)
    for _ in range(100):  # what bubblewrap started is in its process group
        if subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).returncode != 0:
            break
        time.sleep(0.05)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    if left:
        subprocess.run(["pkill", "-9", "-g", str(proc.pid)])
    assert left == "" and not (candidate / "ran").exists()


@requires_bwrap
def test_a_sandbox_that_ends_while_being_limited_is_bubblewraps_failure(sandbox, candidate, monkeypatch):
    def fails_meanwhile(pid, values):
        os.kill(pid, 9)  # as a mount that fails in bubblewrap's setup would end it
        time.sleep(0.2)
        raise SandboxError("cannot set the sandbox's limits: [Errno 3] No such process")

    monkeypatch.setattr(gate.LIMITER, "apply", fails_meanwhile)
    result = sandbox.exec(["touch", "/app/ran"])
    assert result.returncode != 0 and not result.timed_out
    assert not (candidate / "ran").exists()


@requires_bwrap
def test_twin_killed_while_a_sandbox_is_held_leaves_nothing(candidate, tmp_path):
    marker = f"held-{os.getpid()}-{time.monotonic_ns()}"
    twin = f"""
import os, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
from pathlib import Path
from ground.boundary import Boundary, Limits, Mount
from ground.isolation import python_mounts
from ground.sandboxes import gate
from ground.sandboxes.bwrap import BwrapSandbox

def slow(pid, values):
    # Held at the gate: past bubblewrap's own start-up, whose parent still signals the sandbox
    # (an eventfd) just after its report; a twin killed in those microseconds is bubblewrap's race.
    time.sleep(0.5)
    print(pid, flush=True)
    time.sleep(60)

gate.LIMITER.apply = slow
box = BwrapSandbox(Boundary(name="t", mounts=[*python_mounts(), Mount(host=Path({str(candidate)!r}), inside="/app",
    writable=True)], workdir="/app", limits=Limits(wall_s=120)))
box.exec(["sh", "-c", "touch /app/ran; sleep 100 # {marker}"])
"""
    proc = subprocess.Popen([sys.executable, "-c", twin], stdout=subprocess.PIPE, text=True)
    try:
        held = int(proc.stdout.readline())
        assert Path(f"/proc/{held}").exists()
    finally:
        proc.kill()
        proc.wait()
        recover_capped()  # the killed twin's capped candidate, as the next twin would on starting
    for _ in range(100):
        if not Path(f"/proc/{held}").exists():
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{held}").exists()
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left == "" and not (candidate / "ran").exists()


CROWD = """
import os, sys, time
for _ in range(16):
    if os.fork() == 0:
        os.setsid()
        held = bytearray(64 << 20)  # 64 MiB the kernel has to give back when the process is killed
        for at in range(0, len(held), 4096):
            held[at] = 1
        print("up", flush=True)
        for fd in (0, 1, 2):  # nothing of the command's output waits for its end
            os.close(fd)
        time.sleep(300)
        os._exit(0)
time.sleep(300)
"""


def _running_with(marker: str) -> list[str]:
    """The processes whose command line holds `marker` that still run (a zombie runs nothing)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(f"{entry.name} [{state}]")
        except (OSError, IndexError):
            continue
    return found


@requires_bwrap
def test_a_command_returns_only_once_nothing_in_its_sandbox_runs(sandbox):
    marker = f"crowd-{os.getpid()}-{time.monotonic_ns()}"
    result = sandbox.exec(["python3", "-c", CROWD, marker], timeout_s=4)
    assert result.timed_out and result.stdout.count("up") == 16, result.stderr
    assert _running_with(marker) == []  # sent SIGKILL is not gone: the end of the namespace's init is waited for


def test_a_sandbox_that_does_not_end_after_sigkill_fails_its_command(sandbox, monkeypatch):
    monkeypatch.setattr(LaunchGate, "end", lambda self, kill: False)
    with pytest.raises(SandboxError, match="did not end within 10 s of SIGKILL"):
        sandbox.exec(["true"])


def test_a_filter_that_a_pipe_cannot_take_whole_is_refused():
    for size in (0, 12, 8 * 1024):
        with pytest.raises(SandboxError, match="cannot be handed over whole"):
            LaunchGate(b"\0" * size)


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
    reply_s = gate.HELPER_REPLY_S
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
        stopped = limiter.helper_pid()
        os.kill(stopped, signal.SIGSTOP)  # one that does not answer is replaced
        gate.HELPER_REPLY_S = 0.5
        limiter.apply(target.pid, values)
        assert limiter.helper_pid() not in (None, stopped)
        with pytest.raises(SandboxError, match="cannot set the sandbox's limits"):
            limiter.apply(own.pid, values)
    finally:
        gate.HELPER_REPLY_S = reply_s
        for proc in (target, own):
            proc.kill()
            proc.wait()
        limiter._stop()


HELPER_AT_EXIT = """
import os, signal, subprocess, sys
from ground.sandboxes.gate import LIMITER
LIMITER._direct = False
target = int(sys.argv[1])
LIMITER.apply(target, (1 << 30, 0, 1 << 20, 50))
os.kill(LIMITER.helper_pid(), signal.SIGSTOP)  # left to see its input end, it would never end now
print(LIMITER.helper_pid(), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the helper is root's way to limit the sandbox uid's processes")
def test_the_helper_is_ended_and_reaped_before_twin_exits():
    target = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
    try:
        time.sleep(0.2)
        done = subprocess.run([sys.executable, "-c", HELPER_AT_EXIT, str(target.pid)], capture_output=True,
                              text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert done.returncode == 0, done.stderr
        helper = int(done.stdout)
        assert not Path(f"/proc/{helper}").exists(), "the helper outlived the process that started it"
    finally:
        target.kill()
        target.wait()


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
