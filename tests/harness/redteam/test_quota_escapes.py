"""Filling the disk past the caps from inside, where a watched cap cannot see or keep up.

A walk of the writable root misses files unlinked while they are open, and a burst of
parallel writers passes it between two looks; `/dev/shm` is a second tmpfs next to the
capped `/tmp`. Each test tries one of these with small caps (24 MiB of disk, 16 MiB of
`/tmp` and `/dev/shm`) and fails if more than the cap was held. Writable roots are
capped by a filesystem only where twin can mount one (root, loop devices): elsewhere
those tests skip, and only the watched cap of `test_kernel_escapes.py` applies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ground.agent_tree import discard_tree
from ground.boundary import Boundary, Limits, Mount
from ground.isolation import python_mounts, scratch_dir
from ground.sandboxes.quota import EXT4, TMPFS, unavailable
from ground.sandboxes.registry import make_sandbox
from harness.run.workspace import prepare_workspace, role_boundary
from tests.conftest import requires_bwrap

pytestmark = [requires_bwrap, pytest.mark.bwrap]
CAP_MB = 24
SMALL = Limits(wall_s=30, memory_mb=1024, max_procs=64, tmp_mb=16, shm_mb=16, disk_mb=CAP_MB)
requires_capped = pytest.mark.skipif(
    unavailable(EXT4) is not None or unavailable(TMPFS) is not None,
    reason=f"no capped filesystem here: {unavailable(EXT4) or unavailable(TMPFS)}",
)

# Writes 1 MiB at a time into ten files, each unlinked right after it is opened (100 MiB
# asked for); prints how many MiB it held when a write was refused or when it finished.
UNLINKED = r"""
import os, sys
root, fds, held = sys.argv[1], [], 0
try:
    for i in range(10):
        fd = os.open(f"{root}/unlinked{i}", os.O_CREAT | os.O_WRONLY, 0o600)
        os.unlink(f"{root}/unlinked{i}")
        fds.append(fd)
        for _ in range(10):
            os.write(fd, b"x" * (1 << 20))
            held += 1
    print("held", held, "finished", flush=True)
except OSError as exc:
    print("held", held, "refused", exc.errno, flush=True)
"""


@dataclass
class Capped:
    sandbox: object
    candidate: Path

    def exec(self, *args, **kwargs):
        return self.sandbox.exec(*args, **kwargs)

    def write_file(self, path: str, data: str) -> None:
        self.sandbox.write_file(path, data)


@pytest.fixture(scope="module")
def small(arena, tmp_path_factory):
    """A Migrator's sandbox over a candidate of its own (the arena's is capped at 2 GiB already)."""
    ws = prepare_workspace(arena.task, tmp_path_factory.mktemp("capped") / "workspace")
    (ws.candidate / "kept.txt").write_text("kept\n")
    boundary = role_boundary(
        arena.task, ws, name="migrator", write_candidate=True, side="candidate", audit_log=arena.audit_log, limits=SMALL
    )
    sandbox = make_sandbox(arena.kind, boundary)
    yield Capped(sandbox, ws.candidate)
    sandbox.close()
    assert not os.path.ismount(ws.candidate)  # released: a plain directory with what was written
    assert (ws.candidate / "kept.txt").read_text() == "kept\n"


@pytest.fixture(scope="module")
def scratch(arena):
    """A probe side's shape: twin's own scratch directory is the writable root, at /probe."""
    work = scratch_dir("twin-redteam-")
    boundary = Boundary(
        name="probe:candidate",
        mounts=[*python_mounts(), Mount(host=work, inside="/probe", writable=True)],
        limits=SMALL,
        workdir="/probe",
    )
    sandbox = make_sandbox(arena.kind, boundary)
    yield Capped(sandbox, work)
    sandbox.close()
    assert not os.path.ismount(work)
    discard_tree(work)


def test_dev_shm_is_a_small_tmpfs(small):
    result = small.exec("head -c 40M /dev/zero > /dev/shm/fill; echo rc=$?; du -m /dev/shm/fill")
    assert "rc=0" not in result.stdout, result
    assert int(result.stdout.split()[-2]) <= 16, result


def test_dev_shm_is_private_to_the_command(small):
    assert small.exec("echo x > /dev/shm/planted").ok
    assert small.exec("ls /dev/shm").stdout.strip() == ""


@requires_capped
@pytest.mark.parametrize("where", ["candidate", "scratch"])
def test_files_unlinked_while_open_count_against_the_cap(request, arena, where):
    sandbox = request.getfixturevalue("small" if where == "candidate" else "scratch")
    root = "/app" if where == "candidate" else "/probe"
    sandbox.write_file(f"{root}/unlinked.py", UNLINKED)
    result = sandbox.exec(["python", f"{root}/unlinked.py", root])
    words = result.stdout.split()
    assert words[:1] == ["held"] or result.exceeded is not None, result
    held = int(words[1]) if words[:1] == ["held"] else 0
    assert "finished" not in words, result  # 100 MiB were never held under a 24 MiB cap
    assert held <= CAP_MB, result
    assert sandbox.exec(f"rm -f {root}/unlinked.py; echo alive").stdout.strip() == "alive"


@requires_capped
def test_a_burst_of_parallel_writers_stops_at_the_cap(small):
    """40 writers of 20 MiB at once: a watched cap lets them past; a filesystem's does not."""
    result = small.exec(
        "mkdir -p /app/burst; for i in $(seq 40); do (head -c 20M /dev/zero > /app/burst/$i &); done; wait;"
        " sleep 1; du -sm /app/burst"
    )
    try:
        allocated = sum(os.lstat(p).st_blocks * 512 for p in (small.candidate / "burst").iterdir())
        assert allocated <= CAP_MB << 20, (allocated >> 20, result)
        assert result.exceeded is not None and result.exceeded.startswith("disk: /app"), result
    finally:
        small.exec("rm -rf /app/burst")
    assert small.exec("echo hello > /app/note && cat /app/note && rm /app/note").stdout.strip() == "hello"


@requires_capped
def test_the_capped_root_shows_no_host_path(small, arena):
    info = small.exec("cat /proc/self/mountinfo")
    line = next(entry for entry in info.stdout.splitlines() if entry.split()[4] == "/app")
    assert line.split()[3] == "/", line  # the root of its own filesystem
    assert str(small.candidate) not in info.stdout and str(small.candidate.parent) not in info.stdout
