"""Owner tags of what sandboxes leave on disk: a record is recovered only once its process is gone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ground.sandboxes.owner import own_tag, owner_alive, process_tag


def test_this_process_owns_its_own_tag():
    tag = own_tag()
    assert tag.split()[0] == str(os.getpid()) and owner_alive(tag)


def test_a_reused_pid_with_another_start_time_is_not_the_owner():
    pid, start = own_tag().split()
    assert not owner_alive(f"{pid} {int(start) + 1}")


def test_a_process_that_ended_owns_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = process_tag(child.pid)
    child.wait()
    assert tag is not None and not owner_alive(tag)


@pytest.mark.parametrize("tag", ["", "   ", "x 12", "0 12", "-1 5", "12"])
def test_an_empty_or_garbled_tag_names_no_live_owner(tag):
    assert not owner_alive(tag)


def test_the_cpu_of_a_process_tree_is_read_from_proc():
    import os
    import signal
    import subprocess
    import time

    from ground.sandboxes.owner import tree_cpu_s

    busy = subprocess.Popen(["bash", "-c", "sh -c 'while :; do :; done' & wait"], process_group=0)
    try:
        time.sleep(1.0)
        cpu = tree_cpu_s(busy.pid)
    finally:
        os.killpg(busy.pid, signal.SIGKILL)
        busy.wait()
    assert cpu is not None and cpu > 0  # the grandchild's busy loop counts for the tree
    assert tree_cpu_s(busy.pid) is None
