"""The README's two commands on a bare Debian container (`scripts/bare-machine-check.sh`).

The check builds (once) a minimal Debian root filesystem with python3 and git, then runs, in a
container of it, both commands without root (they must stop at once with the command to run) and
as root from a fresh clone (they must pass). It needs root, a running docker engine and either
debootstrap or the cached root filesystem; it takes tens of minutes on two cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("TWIN_BARE_CACHE", "/var/cache/twin-bare-machine"))
IMAGE = "twin-bare-machine:bookworm"


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("docker") is None:
        return "needs docker"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "the docker engine is not running"
    cached = (CACHE / "bookworm-minbase-python3-git.tar").exists() or (
        subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0
    )
    if shutil.which("debootstrap") is None and not cached:
        return "needs debootstrap (or the root filesystem it built, cached or imported)"
    return None


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_readme_commands_pass_on_a_bare_debian_machine():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run(
        [str(REPO / "scripts" / "bare-machine-check.sh")], cwd=REPO, capture_output=True, text=True, timeout=3500
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = [line for line in proc.stdout.splitlines() if line.endswith("s") and (" PASS " in line)]
    assert len(summary) == 6, proc.stdout[-3000:]  # two non-root stops, clone, example and its grades, suite
    assert proc.stdout.rstrip().endswith("bare-machine-check: PASS")


def test_the_check_refuses_without_root_in_one_line(request):
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot drop to a user")
        prefix = [shutil.which("setpriv"), "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    top = Path(tempfile.mkdtemp(prefix="twin-scripts-", dir="/tmp"))  # any user can read it (not /root)
    script = top / "bare-machine-check.sh"
    shutil.copy(REPO / "scripts" / "bare-machine-check.sh", script)
    top.chmod(0o755)
    script.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(top))
    proc = subprocess.run(
        [*prefix, "bash", str(script)],
        capture_output=True, text=True, timeout=30, cwd="/tmp", env={"PATH": os.environ["PATH"], "HOME": "/tmp"},
    )  # fmt: skip
    assert proc.returncode == 2
    expected = f"bare-machine-check: needs root (debootstrap and docker); run: sudo {script}"
    assert proc.stderr.strip().splitlines() == [expected]
