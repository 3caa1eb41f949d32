"""Attacks on the kernel state a sandbox shares with the host, from the Migrator's shell.

Each test tries one thing from inside (write a kernel setting, plant a key, open an
io_uring, make a user namespace, keep a setuid file, fill the disk) and fails if it
worked. Run as root (as CI does) they also check that the sandbox is not host root.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat

import pytest

from ground.agent_tree import remove_tree
from ground.boundary import Limits
from ground.sandboxes.registry import make_sandbox
from harness.run.workspace import role_boundary
from tests.conftest import requires_bwrap

pytestmark = [requires_bwrap, pytest.mark.bwrap]
X86_64 = platform.machine() == "x86_64"

# system call numbers (x86_64) and the errno each attempt reports, printed by the probe below
SYSCALL_PROBE = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
nr = {"add_key": 248, "keyctl": 250, "io_uring_setup": 425, "bpf": 321,
      "perf_event_open": 298, "ptrace": 101, "userfaultfd": 323}
calls = {
    "add_key": (b"user", b"twin-planted", b"x", 1, -3),
    "keyctl": (0, -3, 0),                    # KEYCTL_GET_KEYRING_ID of the session keyring
    "io_uring_setup": (8, ctypes.create_string_buffer(120)),
    "bpf": (0, 0, 0),
    "perf_event_open": (0, 0, -1, -1, 0),
    "ptrace": (0, 0, 0, 0),                  # PTRACE_TRACEME
    "userfaultfd": (0,),
}
name = sys.argv[1]
ctypes.set_errno(0)
r = libc.syscall(nr[name], *calls[name])
print(name, r, ctypes.get_errno())
"""


def run_probe(arena, name: str) -> tuple[int, int]:
    arena.sandbox.write_file("/app/syscall_probe.py", SYSCALL_PROBE)
    result = arena.sandbox.exec(["python", "/app/syscall_probe.py", name])
    assert result.returncode == 0, result
    _, ret, err = result.stdout.split()
    return int(ret), int(err)


@pytest.mark.skipif(not X86_64, reason="system call numbers of the probe are x86_64's")
@pytest.mark.parametrize(
    "name", ["add_key", "keyctl", "io_uring_setup", "bpf", "perf_event_open", "ptrace", "userfaultfd"]
)
def test_shared_kernel_interfaces_are_refused(arena, name):
    ret, err = run_probe(arena, name)
    assert ret == -1 and err == 1, f"{name} returned {ret} (errno {err}): not refused by seccomp"


@pytest.mark.skipif(not X86_64, reason="system call numbers are x86_64's")
def test_a_key_planted_by_the_harness_is_not_visible_inside(arena):
    libc = ctypes.CDLL(None, use_errno=True)
    serial = libc.syscall(248, b"user", b"twin-harness-key", b"SECRET", 6, -3)
    if serial < 0:
        pytest.skip("this host refuses add_key to the harness itself")
    try:
        result = arena.sandbox.exec(
            "cat /proc/keys 2>&1; python - <<'EOF'\n"
            "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n"
            "print('search', l.syscall(250, 10, -3, b'user', b'twin-harness-key', 0))\nEOF"
        )
    finally:
        libc.syscall(250, 21, serial)  # KEYCTL_INVALIDATE
    assert "twin-harness-key" not in result.stdout
    assert "search -1" in result.stdout, result


def test_no_further_user_namespace(arena):
    result = arena.sandbox.exec("unshare -Ur id -u 2>&1; echo rc=$?")
    assert "rc=0" not in result.stdout, result
    assert not result.stdout.startswith("0")


def test_mount_is_refused_even_inside_the_sandbox(arena):
    result = arena.sandbox.exec("mkdir -p /tmp/m && mount -t tmpfs none /tmp/m 2>&1; echo rc=$?")
    assert "rc=0" not in result.stdout


def test_kernel_settings_are_not_writable(arena):
    """Writes the value a setting already has (harmless if it got through) and expects refusal."""
    settings = ["/proc/sys/vm/swappiness", "/proc/sys/kernel/printk_ratelimit"]
    script = "; ".join(f'v=$(cat {s}); echo "$v" > {s} && echo WROTE {s}' for s in settings)
    result = arena.sandbox.exec(script + "; test -w /proc/sysrq-trigger && echo SYSRQ-WRITABLE")
    assert "WROTE" not in result.stdout and "SYSRQ-WRITABLE" not in result.stdout, result


def test_sandbox_is_never_host_root(arena):
    """What the sandbox creates belongs, on the host, to the sandbox uid, never to root."""
    (arena.ws.candidate / "owner-probe").unlink(missing_ok=True)
    result = arena.sandbox.exec("sleep 0 > /app/owner-probe; grep -E 'Cap(Eff|Prm|Bnd)' /proc/self/status")
    assert "CapEff:\t0000000000000000" in result.stdout, result
    created = os.stat(arena.ws.candidate / "owner-probe").st_uid
    assert created != 0 and (os.geteuid() == 0) == (created == 65534), created


def test_candidate_mount_is_nosuid_and_nodev(arena):
    """bwrap mounts /app nosuid,nodev; docker cannot, and neutralises both otherwise."""
    result = arena.sandbox.exec("grep ' /app ' /proc/self/mountinfo; grep NoNewPrivs /proc/self/status")
    options = result.stdout.split()[5].split(",")
    if arena.kind == "docker":
        # no_new_privs: a setuid bit grants nothing; no CAP_MKNOD and the device cgroup: no devices
        assert "NoNewPrivs:\t1" in result.stdout, result.stdout
    else:
        assert "nosuid" in options and "nodev" in options, result.stdout


def test_setuid_bits_do_not_leave_the_candidate(arena):
    result = arena.sandbox.exec(
        "cp /bin/true /app/suid && chmod 6755 /app/suid && mkdir -p /app/sgid && chmod 2775 /app/sgid"
        " && cp /bin/true /app/linked && chmod 6755 /app/linked && ln /app/linked /app/linked2"
        " && stat -c %a /app/suid"
    )
    assert result.returncode == 0, result
    assert os.lstat(arena.ws.candidate / "linked").st_nlink == 2
    for name in ("suid", "sgid", "linked", "linked2"):
        mode = os.lstat(arena.ws.candidate / name).st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), f"{name}: {oct(mode)}"


# ---- filling the disk ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(arena):
    boundary = role_boundary(
        arena.task,
        arena.ws,
        name="migrator",
        write_candidate=True,
        side="candidate",
        audit_log=arena.audit_log,
        limits=Limits(wall_s=30, memory_mb=1024, max_procs=64, tmp_mb=16, disk_mb=24),
    )
    sandbox = make_sandbox(arena.kind, boundary)
    yield sandbox
    sandbox.close()


def test_tmp_is_a_small_tmpfs(small):
    result = small.exec("head -c 40M /dev/zero > /tmp/fill; echo rc=$?; du -m /tmp/fill")
    assert "rc=0" not in result.stdout
    assert int(result.stdout.split()[-2]) <= 16


def test_one_big_file_in_the_candidate_is_stopped(small, arena):
    result = small.exec("head -c 100M /dev/zero > /app/big; echo done")
    try:
        assert not result.ok and result.exceeded is not None, result
        assert result.exceeded.startswith("disk:") and "twin: the command was stopped" in result.stderr
        assert os.stat(arena.ws.candidate / "big").st_size <= 24 * 1024 * 1024
        assert str(arena.ws.candidate) not in result.exceeded
    finally:
        (arena.ws.candidate / "big").unlink(missing_ok=True)
    assert small.exec("echo alive").stdout.strip() == "alive"


def test_many_files_in_the_candidate_are_stopped(small, arena):
    result = small.exec(
        "mkdir -p /app/fill; for i in $(seq 200); do head -c 1M /dev/zero > /app/fill/$i; "
        "sleep 0.01; done; echo finished"
    )
    try:
        assert result.exceeded is not None and result.exceeded.startswith("disk: /app"), result
        assert "finished" not in result.stdout
        assert result.returncode == 125
    finally:
        import shutil

        shutil.rmtree(arena.ws.candidate / "fill", ignore_errors=True)
    assert small.exec("echo alive").ok


def _allocated_mib(root) -> int:
    return sum(os.lstat(p).st_blocks * 512 for p in root.rglob("*") if p.is_file() and not p.is_symlink()) >> 20


def test_blocks_reserved_at_once_cannot_outrun_the_disk_cap(small, arena):
    """fallocate reserves gigabytes in a moment; refused, a burst fills no faster than it writes."""
    result = small.exec(
        "mkdir -p /app/res; for i in $(seq 40); do fallocate -l 20M /app/res/$i 2>/dev/null && echo reserved; done;"
        " python3 -c \"import os\nfor i in range(40):\n fd = os.open(f'/app/res/p{i}', os.O_CREAT | os.O_WRONLY)\n"
        " os.posix_fallocate(fd, 0, 20 << 20)\"; echo finished"
    )
    try:
        assert "reserved" not in result.stdout  # the system call itself is refused
        assert result.exceeded is not None and result.exceeded.startswith("disk: /app"), result
        assert "finished" not in result.stdout
        # what a burst can put there between two looks of the watcher (800 MiB were asked for)
        assert _allocated_mib(arena.ws.candidate / "res") < 24 + 400
    finally:
        remove_tree(arena.ws.candidate / "res")
    assert small.exec("echo alive").ok


def test_parallel_writers_are_stopped_near_the_disk_cap(small, arena):
    result = small.exec(
        "mkdir -p /app/par; for i in $(seq 40); do (head -c 20M /dev/zero > /app/par/$i &); done; wait; sleep 2;"
        " echo finished"
    )
    try:
        assert result.exceeded is not None and result.exceeded.startswith("disk: /app"), result
        assert _allocated_mib(arena.ws.candidate / "par") < 24 + 400
    finally:
        remove_tree(arena.ws.candidate / "par")


@pytest.mark.heavy  # bursts of 800 MB against the cap, twice (7 s)
def test_a_root_over_its_cap_cannot_grow_in_later_commands(small, arena):
    """Each command's overshoot would add up; once over the cap, no later command can write a byte."""
    burst = "mkdir -p /app/rep; for i in $(seq 40); do (head -c 20M /dev/zero > /app/rep/$i &); done; wait; sleep 2"
    try:
        first = small.exec(burst)
        assert first.exceeded is not None and first.exceeded.startswith("disk: /app"), first
        after_first = _allocated_mib(arena.ws.candidate / "rep")
        for _ in range(3):  # each burst's writers are refused their first byte
            small.exec(burst.replace("/rep/$i", "/rep/again$i"))
        assert _allocated_mib(arena.ws.candidate / "rep") == after_first  # not one block more
        refused = small.exec("echo hello > /app/rep/note; echo rc=$?")
        assert "rc=0" not in refused.stdout and refused.exceeded is not None, refused
        assert small.exec("rm -rf /app/rep").ok  # removing files still works
        assert small.exec("echo hello > /app/note && cat /app/note").stdout.strip() == "hello"
    finally:
        remove_tree(arena.ws.candidate / "rep")
        (arena.ws.candidate / "note").unlink(missing_ok=True)
