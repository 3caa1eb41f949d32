"""The README's two commands on a machine without the system packages twin needs.

Without root (or without apt) they stop at once with the one command to run; as root with
apt they install the packages, which a test cannot do here (that path is CI's, `.ci/run`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "env", "id", "dirname", "cat")  # what the scripts use besides the packages checked


@pytest.fixture
def bare_path():
    """A PATH with the shell tools, python3 and apt-get, but no bwrap, git or tmux."""
    bin_dir = Path(tempfile.mkdtemp(prefix="twin-bare-", dir="/tmp"))
    bin_dir.chmod(0o755)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    # a system interpreter where there is one: an unprivileged uid may not reach this one's home
    (bin_dir / "python3").symlink_to(shutil.which("python3", path="/usr/bin:/bin") or sys.executable)
    (bin_dir / "apt-get").write_text("#!/bin/sh\necho apt-get must not run here >&2\nexit 99\n")
    (bin_dir / "apt-get").chmod(0o755)
    yield str(bin_dir)
    shutil.rmtree(bin_dir)


def _as_user(command: list[str]) -> list[str]:
    """`command` as an unprivileged uid when the tests run as root (root would install)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop to a user")
    return [shutil.which("setpriv"), "--reuid", "65534", "--regid", "65534", "--clear-groups", *command]


@pytest.fixture
def scripts_copy(tmp_path):
    """The scripts where any user can read them (a checkout under /root is closed to others)."""
    top = Path(tempfile.mkdtemp(prefix="twin-scripts-", dir="/tmp"))
    shutil.copytree(REPO / "scripts", top / "scripts")
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755)
    yield top
    shutil.rmtree(top)


@pytest.mark.parametrize("script", ["scripts/system-deps.sh", "scripts/example.sh", "scripts/test.sh"])
def test_without_root_the_scripts_stop_at_once_with_the_command_to_run(bare_path, scripts_copy, script):
    started = time.monotonic()
    proc = subprocess.run(
        _as_user([shutil.which("bash"), str(scripts_copy / script)]),
        env={"PATH": bare_path, "HOME": "/tmp"}, capture_output=True, text=True, timeout=30, cwd="/tmp",
    )  # fmt: skip
    assert time.monotonic() - started < 5
    assert proc.returncode == 1, proc.stderr
    # one line: what is missing and the command that installs it
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "install them first: sudo apt-get install -y bubblewrap git tmux" in proc.stderr
    assert "must not run" not in proc.stderr


def test_with_everything_present_the_check_is_silent():
    if not all(shutil.which(t) for t in ("bwrap", "git", "tmux")):
        pytest.skip("this machine lacks a package twin needs")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "system-deps.sh")], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
