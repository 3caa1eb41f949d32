"""One command watched from the calling thread: output, input, wall time and end, without helper threads."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from ground.boundary import Limits
from ground.sandboxes import supervise
from ground.sandboxes.process import PidsCgroup, run_limited

PY = sys.executable


@pytest.fixture(params=["pidfd", "polling"])
def exit_seen_by(request, monkeypatch):
    """Every test runs with the command's end seen through a pidfd, and by polling (kernels without one)."""
    if request.param == "polling":
        monkeypatch.setattr(supervise, "pidfd", lambda pid: None)
    return request.param


def test_no_thread_is_started_for_a_command(monkeypatch, exit_seen_by):
    def refuse(*args, **kwargs):
        raise AssertionError("a thread was started")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    result = run_limited([PY, "-c", "print('hi')"], env={}, cwd="/", limits=Limits(wall_s=20), stdin="")
    assert result.ok and result.stdout == "hi\n"


def test_both_streams_far_past_a_pipe_buffer_are_read_while_the_command_writes(exit_seen_by):
    code = "import sys\nfor i in range(200):\n    sys.stdout.write('o' * 4096); sys.stderr.write('e' * 4096)\n"
    result = run_limited([PY, "-c", code], env={}, cwd="/", limits=Limits(wall_s=30, output_bytes=1 << 22))
    assert result.ok and len(result.stdout) == len(result.stderr) == 200 * 4096 and not result.truncated


def test_stdin_larger_than_a_pipe_buffer_is_fed_whole(exit_seen_by):
    data = "x" * (1 << 20) + "\n"
    code = "import sys; print(len(sys.stdin.read()))"
    result = run_limited([PY, "-c", code], env={}, cwd="/", limits=Limits(wall_s=30), stdin=data)
    assert result.ok and result.stdout.strip() == str(len(data))


def test_stdin_a_command_never_reads_does_not_hold_it(exit_seen_by):
    started = time.monotonic()
    result = run_limited(
        ["true"], env={"PATH": "/usr/bin:/bin"}, cwd="/", limits=Limits(wall_s=30), stdin="y" * (1 << 20)
    )
    assert result.ok and time.monotonic() - started < 10


def test_the_wall_time_stops_the_command_and_what_it_started(tmp_path, exit_seen_by):
    marker = tmp_path / "late"
    code = f"sleep 30 & sleep 1.5; touch {marker}; wait"
    result = run_limited(["sh", "-c", code], env={"PATH": "/usr/bin:/bin"}, cwd="/", limits=Limits(wall_s=0.5))
    assert result.timed_out and result.returncode == 124 and result.duration_s < 10
    time.sleep(1.5)
    assert not marker.exists()  # its group was killed, children included


def test_a_command_that_ends_is_not_held_by_a_process_it_left_holding_the_pipes(monkeypatch, exit_seen_by):
    """A process that left the command's group keeps the pipes open: the result comes once the drain gives up."""
    monkeypatch.setattr(supervise, "DRAIN_AFTER_EXIT_S", 1.0)
    code = "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(20); os._exit(0)\nprint('done')\n"
    started = time.monotonic()
    result = run_limited([PY, "-c", code], env={}, cwd="/", limits=Limits(wall_s=60))
    assert result.ok and "done" in result.stdout and time.monotonic() - started < 10


def test_the_command_s_status_output_and_duration_come_back(exit_seen_by):
    result = run_limited(["sh", "-c", "echo out; echo err >&2; exit 3"], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                         limits=Limits(wall_s=20))  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n") and result.duration_s > 0


def test_a_finished_command_s_group_is_removed_later_not_waited_for():
    if PidsCgroup.create(5) is None:
        pytest.skip("no writable pids cgroup here")
    PidsCgroup.remove_pending()
    run_limited(["true"], env={"PATH": "/usr/bin:/bin"}, cwd="/", limits=Limits(wall_s=20))
    pending = list(PidsCgroup._pending)
    assert pending and all(group.path.exists() for group in pending)  # left, not waited for
    PidsCgroup.remove_pending()
    assert not PidsCgroup._pending and not any(group.path.exists() for group in pending)


def test_a_group_left_pending_is_removed_by_a_later_create_once_freed():
    first = PidsCgroup.create(5)
    if first is None:
        pytest.skip("no writable pids cgroup here")
    PidsCgroup.remove_pending()
    first.discard()
    deadline = time.monotonic() + 10
    second = PidsCgroup.create(5)
    while first.path.exists() and time.monotonic() < deadline:
        second.discard()
        second = PidsCgroup.create(5)
    assert not first.path.exists()
    second.discard()
    PidsCgroup.remove_pending()


def test_the_pidfd_is_what_a_linux_kernel_gives():
    pid = os.getpid()
    fd = supervise.pidfd(pid)
    if fd is None:
        pytest.skip("this kernel has no pidfd_open")
    os.close(fd)
