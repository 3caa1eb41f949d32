"""Keeping head and tail of output, and the pids cgroup where the host has one."""

from __future__ import annotations

import sys

import pytest

from ground.boundary import Limits
from ground.sandbox import SandboxError
from ground.sandboxes.process import HeadTail, PidsCgroup, limit_prefix, run_limited


@pytest.mark.parametrize("chunks", [[b"a" * 10], [b"ab"] * 50, [b"x" * 1000, b"END"]])
def test_head_tail_keeps_both_ends(chunks):
    keep = HeadTail(20)
    for chunk in chunks:
        keep.feed(chunk)
    data = b"".join(chunks)
    assert keep.total == len(data)
    if len(data) <= 20:
        assert keep.text() == data.decode() and not keep.truncated
    else:
        assert keep.truncated
        text = keep.text()
        assert text.startswith(data[:10].decode()) and text.endswith(data[-10:].decode())
        assert f"{len(data) - 20} bytes of output dropped" in text


def test_run_limited_reports_status_output_and_time_out():
    limits = Limits(wall_s=5, output_bytes=100)
    ok = run_limited([sys.executable, "-c", "print('hi')"], env={}, cwd="/", limits=limits)
    assert ok.ok and ok.stdout == "hi\n" and ok.duration_s > 0
    slow = run_limited(["sleep", "10"], env={}, cwd="/", limits=limits.model_copy(update={"wall_s": 0.3}))
    assert slow.timed_out and slow.returncode == 124


def test_memory_limit_applies_without_prlimit():
    limits = Limits(memory_mb=200)
    hog = [sys.executable, "-c", "bytearray(1024**3)"]
    result = run_limited(hog, env={}, cwd="/", limits=limits)
    assert result.returncode != 0 and "MemoryError" in result.stderr


def test_missing_program_is_a_sandbox_error():
    with pytest.raises(SandboxError, match="could not start"):
        run_limited(["/nonexistent/program"], env={}, cwd="/", limits=Limits())


def test_limit_prefix():
    assert limit_prefix(Limits(), prlimit=None) == []
    args = limit_prefix(Limits(memory_mb=1, max_procs=7, disk_mb=3), prlimit="/usr/bin/prlimit")
    assert args == ["/usr/bin/prlimit", f"--as={1024 * 1024}", "--core=0", f"--fsize={3 << 20}", "--"]


def test_run_limited_stops_a_command_over_its_disk_cap(tmp_path):
    from ground.sandboxes.disk import DISK_RETURNCODE, DiskWatch

    result = run_limited(
        ["bash", "-c", f"for i in $(seq 100); do head -c 1M /dev/zero > {tmp_path}/f$i; sleep 0.02; done"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        limits=Limits(wall_s=30, disk_mb=5),
        disk=DiskWatch([tmp_path], 5, ["/scratch"]),
    )
    assert result.returncode == DISK_RETURNCODE and result.exceeded.startswith("disk: /scratch")
    assert len(list(tmp_path.iterdir())) < 100


def test_pids_cgroup_caps_processes_where_available():
    group = PidsCgroup.create(5)
    if group is None:
        pytest.skip("no writable pids cgroup here")
    group.remove()
    code = (
        "import os, time\nn = 0\ntry:\n    for _ in range(50):\n"
        "        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\n"
        "except OSError:\n    print(n)\n"
    )
    result = run_limited([sys.executable, "-c", code], env={}, cwd="/", limits=Limits(max_procs=8))
    assert result.stdout.strip() and int(result.stdout) < 8
