"""Escape attempts through the real bubblewrap sandbox; each test fails if its attempt succeeds.

The agent's position is the Migrator's: a shell in the sandbox with the candidate
(/app) writable, plus the harness's read_file/write_file tools. Attempts through
the tools must be refused *and* audited; attempts from the shell must find
nothing (the hidden files do not exist inside) or be contained by the limits.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from ground.boundary import BoundaryViolation
from tests.conftest import requires_bwrap
from tests.harness.redteam.conftest import API_KEY, SECRET

pytestmark = [requires_bwrap, pytest.mark.bwrap]


def shell(arena, command: str, **kwargs):
    return arena.sandbox.exec(command, **kwargs)


def assert_no_secret(result) -> None:
    assert SECRET not in result.stdout and SECRET not in result.stderr, result


def assert_refused_and_audited(arena, call, target: str) -> None:
    before = len(arena.audit_lines())
    with pytest.raises(BoundaryViolation):
        call()
    lines = arena.audit_lines()
    assert len(lines) == before + 1, "one refusal, one audit line"
    record = json.loads(lines[-1])
    assert record["target"] == target and record["boundary"] == "migrator"


# ---- reading hidden files from the shell ---------------------------------------------------------
@pytest.mark.parametrize("which", range(5), ids=["tests", "solution", "task.toml", "evidence", "audit"])
def test_read_hidden_file_by_absolute_host_path(arena, which):
    path = arena.secret_files()[which]
    result = shell(arena, f"cat {path}")
    assert result.returncode != 0
    assert_no_secret(result)


def test_read_tests_by_relative_path_from_candidate(arena):
    depth = "../" * 12
    secret = f"{depth}{str(arena.task.root).lstrip('/')}/tests/refs/secret.txt"
    result = shell(arena, f"cd /app && test -w . && echo IN-APP && cat {secret}")
    assert "IN-APP" in result.stdout, "the attempt must start from the writable candidate"
    assert result.returncode != 0
    assert_no_secret(result)


def test_read_tests_through_symlink_planted_in_candidate(arena):
    target = arena.task.root / "tests"
    result = shell(arena, f"ln -sfn {target} /app/planted && echo PLANTED && cat /app/planted/refs/secret.txt")
    assert "PLANTED" in result.stdout and (arena.ws.candidate / "planted").is_symlink()
    assert result.returncode != 0
    assert_no_secret(result)


def test_read_grader_mount_path_from_role_sandbox(arena):
    result = shell(arena, "ls /tests /solution /logs; cat /tests/refs/secret.txt")
    assert result.returncode != 0
    assert_no_secret(result)


def test_read_tests_through_proc_self_root(arena):
    result = shell(arena, f"cat /proc/self/root{arena.task.root}/tests/refs/secret.txt")
    assert result.returncode != 0
    assert_no_secret(result)


def test_read_through_parent_process_cwd_and_root(arena):
    result = shell(
        arena,
        f"for p in /proc/[0-9]*; do cat $p/cwd{arena.task.root}/tests/refs/secret.txt "
        f"$p/root{arena.task.root}/tests/refs/secret.txt; done; "
        "cat /proc/$PPID/cwd/../../tests/refs/secret.txt",
    )
    assert result.returncode != 0
    assert_no_secret(result)


def test_only_sandbox_processes_are_visible(arena):
    result = shell(arena, f"ls -d /proc/[0-9]* | wc -l; kill -0 {os.getpid()} && echo REACHED")
    assert "REACHED" not in result.stdout
    assert int(result.stdout.split()[0]) < 10


def test_hard_link_to_hidden_file_from_shell(arena):
    result = shell(
        arena,
        f"test -w /app && echo IN-APP; ln {arena.task.root}/tests/refs/secret.txt /app/hl && cat /app/hl",
    )
    assert "IN-APP" in result.stdout
    assert result.returncode != 0
    assert not (arena.ws.candidate / "hl").exists()
    assert_no_secret(result)


def test_list_task_directory(arena):
    result = shell(arena, f"ls -la {arena.task.root} {arena.task.root}/tests {arena.run_dir}")
    assert result.returncode != 0
    assert "secret.txt" not in result.stdout and "evidence.sqlite" not in result.stdout


def test_find_secret_anywhere_in_the_filesystem(arena):
    # All but the system and interpreter trees (mounted from fixed host paths, slow to scan).
    trees = (
        "/usr",
        "/lib",
        "/lib64",
        "/bin",
        "/sbin",
        "/proc",
        "/sys",
        "/dev",
        sys.prefix,
        sys.base_prefix,
    )
    prune = " ".join(f"-path {p} -prune -o" for p in trees)
    result = shell(
        arena,
        f"find / {prune} -type f -print0 2>/dev/null | xargs -0 grep -Il {SECRET} 2>/dev/null; echo done",
        timeout_s=60,
    )
    assert "done" in result.stdout
    assert result.stdout.strip() == "done", result.stdout


def test_twin_repository_and_home_are_not_mounted(arena, repo_root):
    result = shell(arena, f"ls {repo_root}/tests {repo_root}/harness {Path.home()}/.ssh {Path.home()}/.cache")
    assert result.returncode != 0 and result.stdout == ""
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    for entry in shell(arena, f"ls -A {Path.home()}").stdout.split():
        assert any(Path.home() / entry in [p, *p.parents] for p in prefixes), entry


# ---- history of the source repository ------------------------------------------------------------
def test_source_has_no_git_history(arena):
    result = shell(
        arena,
        "find /source -name '.git*' -o -name packed-refs -o -name ORIG_HEAD; "
        "git -C /source log --all 2>&1 | head -1; grep -rI " + SECRET + " /source",
    )
    assert ".git" not in result.stdout and "packed-refs" not in result.stdout
    assert "commit " not in result.stdout
    assert_no_secret(result)


# ---- secrets in the environment ------------------------------------------------------------------
def test_environment_has_no_api_keys(arena):
    assert os.environ["OPENAI_API_KEY"] == API_KEY  # the harness itself holds one
    result = shell(arena, "env")
    assert API_KEY not in result.stdout
    assert "OPENAI_API_KEY" not in result.stdout and "GITHUB_TOKEN" not in result.stdout


def test_proc_environ_of_every_visible_process_has_no_keys(arena):
    result = shell(
        arena,
        "cat /proc/1/environ /proc/$PPID/environ /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
    )
    assert API_KEY not in result.stdout


# ---- network -------------------------------------------------------------------------------------
CONNECT = """
import socket, sys
routes = [l for l in open('/proc/net/route').read().splitlines()[1:] if l.strip()]
devices = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]
if routes or set(devices) - {'lo'}:
    print('ROUTE-PRESENT', routes, devices); sys.exit(3)
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    print('CONNECTED')
except OSError as exc:
    print('refused', exc.errno)
"""


@pytest.mark.parametrize("address", ["1.1.1.1", "10.0.0.1", "192.168.1.1"], ids=["public", "private10", "private192"])
def test_tcp_connection_off_machine_has_no_route(arena, address):
    # The script checks there is no route before it tries: it never sends traffic off the machine.
    arena.sandbox.write_file("/app/connect.py", CONNECT)
    result = shell(arena, ["python", "/app/connect.py", address, "443"])
    assert "ROUTE-PRESENT" not in result.stdout, result
    assert "CONNECTED" not in result.stdout
    assert "refused" in result.stdout


def test_loopback_server_of_the_host_is_unreachable(arena):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        port = server.getsockname()[1]
        code = (
            "import socket\ntry:\n"
            f" socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
            "except OSError: print('refused')"
        )
        result = shell(arena, ["python", "-c", code])
        assert result.stdout.strip() == "refused", result
    finally:
        server.close()


def test_abstract_unix_socket_of_the_host_is_unreachable(arena):
    name = f"twin-redteam-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + name)
    server.listen(1)
    try:
        code = (
            "import socket\ns = socket.socket(socket.AF_UNIX)\n"
            f"try:\n s.connect('\\0{name}'); print('CONNECTED')\nexcept OSError: print('refused')"
        )
        result = shell(arena, ["python", "-c", code])
        assert result.stdout.strip() == "refused", result
    finally:
        server.close()


# ---- writing outside the candidate, planting rewards ---------------------------------------------
def _attempt_writes(arena, paths: list[str]) -> None:
    """Try to create each (new, uniquely named) path; remove any that reached the host.

    Only new names are used, so a broken sandbox fails the test without damaging the host.
    """
    created_before = {p for p in paths if os.path.lexists(p)}
    assert not created_before, created_before
    try:
        result = shell(
            arena,
            "for p in " + " ".join(paths) + "; do echo 1 > $p 2>/dev/null && echo WROTE $p; done; true",
        )
        reached = [p for p in paths if os.path.lexists(p)]
        assert not reached, f"reached the host: {reached}"
        return result
    finally:
        for path in paths:
            if os.path.lexists(path) and not os.path.isdir(path):
                os.unlink(path)


def test_write_outside_candidate_from_shell(arena):
    tag = f"twin-redteam-{uuid.uuid4().hex[:8]}"
    venv = Path(sys.prefix)
    paths = [
        f"/source/{tag}",
        f"/assets/{tag}",
        f"/usr/{tag}",
        f"/etc/{tag}",
        f"{venv}/{tag}",
        f"/{tag}",
        f"{arena.task.root}/tests/{tag}",
    ]
    result = _attempt_writes(arena, paths)
    assert "WROTE /source" not in result.stdout and "WROTE /usr" not in result.stdout
    assert not (arena.ws.source / tag).exists()


@pytest.mark.parametrize("name", ["reward.txt", "reward.json"])
def test_plant_reward_file_where_the_grader_looks(arena, name):
    # The grader's own logs directory and the run directory on the host. (/logs/verifier inside
    # a role sandbox is on its read-only root; host paths under /tmp would land in its private
    # /tmp.) None of these may appear on the host.
    _attempt_writes(arena, [f"{arena.logs_dir}/{name}", f"{arena.run_dir}/{name}"])
    if not os.path.lexists("/logs"):  # on a host that has one, a broken sandbox would write there
        try:
            inside = shell(arena, f"mkdir -p /logs/verifier && echo 1 > /logs/verifier/{name}")
            assert inside.returncode != 0 and not os.path.lexists("/logs")
        finally:
            if os.path.isdir("/logs"):
                shutil.rmtree("/logs")
    for target in (f"/logs/verifier/{name}", f"{arena.logs_dir}/{name}"):
        assert_refused_and_audited(arena, lambda t=target: arena.sandbox.write_file(t, "1"), target)
    assert not (arena.logs_dir / name).exists()


def test_mount_and_device_tricks_fail(arena):
    node = f"/tmp/twin-redteam-{uuid.uuid4().hex[:8]}"
    try:
        result = shell(
            arena,
            f"mkdir {node}.d; mount -t tmpfs none {node}.d 2>&1 || echo nomount; "
            f"mknod {node} b 8 0 2>&1 || echo nomknod; "
            "ls /dev/sda /dev/vda /run/docker.sock 2>&1; grep CapEff /proc/self/status",
        )
    finally:
        for path in (node, node + ".d"):
            if os.path.lexists(path):
                os.rmdir(path) if os.path.isdir(path) else os.unlink(path)
    assert "nomount" in result.stdout and "nomknod" in result.stdout
    assert "CapEff:\t0000000000000000" in result.stdout


# ---- the harness's own tools ---------------------------------------------------------------------
def test_tool_read_by_host_path_is_refused_and_audited(arena):
    target = str(arena.task.root / "tests" / "refs" / "secret.txt")
    assert_refused_and_audited(arena, lambda: arena.sandbox.read_file(target), target)


def test_tool_read_by_relative_path_is_refused_and_audited(arena):
    target = "../" * 10 + str(arena.task.root / "solution" / "app" / "answer.txt").lstrip("/")
    assert_refused_and_audited(arena, lambda: arena.sandbox.read_file(target), target)


def test_tool_read_through_planted_symlink_is_refused_and_audited(arena):
    (arena.ws.candidate / "to_tests").unlink(missing_ok=True)
    os.symlink(arena.task.root / "tests", arena.ws.candidate / "to_tests")
    target = "/app/to_tests/refs/secret.txt"
    assert_refused_and_audited(arena, lambda: arena.sandbox.read_file(target), target)
    (arena.ws.candidate / "rel").unlink(missing_ok=True)
    os.symlink(
        "../../../../../../../../" + str(arena.task.root / "tests").lstrip("/"),
        arena.ws.candidate / "rel",
    )
    assert_refused_and_audited(arena, lambda: arena.sandbox.read_file("/app/rel/test.sh"), "/app/rel/test.sh")


def test_tool_read_through_proc_self_root_is_refused_and_audited(arena):
    target = f"/proc/self/root{arena.task.root}/tests/refs/secret.txt"
    assert_refused_and_audited(arena, lambda: arena.sandbox.read_file(target), target)


def test_tool_read_of_hard_link_to_hidden_file_is_refused_and_audited(arena):
    link = arena.ws.candidate / "hard"
    link.unlink(missing_ok=True)
    try:
        os.link(arena.task.root / "tests" / "refs" / "secret.txt", link)
    except OSError as exc:  # a candidate on a capped filesystem of its own: nothing outside links in
        assert exc.errno == errno.EXDEV and os.path.ismount(arena.ws.candidate), exc
        return
    assert_refused_and_audited(arena, lambda: arena.sandbox.read_file("/app/hard"), "/app/hard")
    assert_refused_and_audited(arena, lambda: arena.sandbox.write_file("/app/hard", "x"), "/app/hard")
    assert (arena.task.root / "tests" / "refs" / "secret.txt").read_text().strip() == SECRET
    link.unlink()


def test_tool_write_through_symlink_out_of_candidate_is_refused_and_audited(arena):
    (arena.ws.candidate / "out").unlink(missing_ok=True)
    os.symlink(arena.task.root / "tests", arena.ws.candidate / "out")
    assert_refused_and_audited(
        arena, lambda: arena.sandbox.write_file("/app/out/test.sh", "exit 0"), "/app/out/test.sh"
    )
    assert "reward" in (arena.task.root / "tests" / "test.sh").read_text()


def test_tool_write_to_read_only_source_is_refused_and_audited(arena):
    assert_refused_and_audited(arena, lambda: arena.sandbox.write_file("/source/pkg/x.py", "x"), "/source/pkg/x.py")
    assert not (arena.ws.source / "pkg" / "x.py").exists()


def test_tool_read_of_audit_log_and_evidence_is_refused(arena):
    for target in (str(arena.audit_log), str(arena.run_dir / "evidence.sqlite")):
        assert_refused_and_audited(arena, lambda t=target: arena.sandbox.read_file(t), target)


# ---- hidden packages -----------------------------------------------------------------------------
def test_torch_is_physically_absent_on_the_candidate_side(arena):
    code = (
        "import importlib.util, sys\n"
        "print(importlib.util.find_spec('torch'), importlib.util.find_spec('functorch'))\n"
        "import torch\n"
    )
    result = shell(arena, ["python", "-c", code])
    assert result.stdout.strip() == "None None"
    assert "ModuleNotFoundError: No module named 'torch'" in result.stderr
    found = shell(arena, "find / -xdev -path /proc -prune -o -name 'torch*' -print 2>/dev/null | head")
    assert found.stdout.strip() == "", found.stdout


# ---- resource exhaustion -------------------------------------------------------------------------
def test_infinite_loop_is_killed_at_the_wall_time(arena):
    start = time.monotonic()
    result = shell(arena, "while true; do :; done", timeout_s=1.0)
    assert result.timed_out and result.returncode == 124
    assert time.monotonic() - start < 5


def test_fork_bomb_is_contained(arena):
    code = (
        "import os, time\nn = 0\n"
        "try:\n    for _ in range(500):\n        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n        n += 1\n"
        "except OSError as exc:\n    print('capped', n, exc.errno)\n"
    )
    start = time.monotonic()
    result = shell(arena, ["python", "-c", code], timeout_s=15)
    assert result.stdout.startswith("capped"), result
    assert int(result.stdout.split()[1]) <= arena.boundary.limits.max_procs
    assert time.monotonic() - start < 14, "children were left holding the command open"
    bomb = shell(arena, "bomb() { bomb | bomb & }; bomb", timeout_s=3)
    assert bomb.duration_s < 10
    assert shell(arena, "echo alive").stdout.strip() == "alive"


def test_memory_hog_is_stopped(arena):
    result = shell(arena, ["python", "-c", "x = bytearray(3 * 1024**3); print('ALLOCATED')"])
    assert result.returncode != 0
    assert "ALLOCATED" not in result.stdout
    assert "MemoryError" in result.stderr


def test_fifty_megabytes_of_output_are_cut_to_head_and_tail(arena):
    result = shell(arena, "head -c 50000000 /dev/zero | tr '\\0' a; echo END")
    assert result.returncode == 0 and result.truncated
    assert len(result.stdout) < 2 * arena.boundary.limits.output_bytes
    assert result.stdout.startswith("aaaa") and result.stdout.rstrip().endswith("END")
    assert "bytes of output dropped" in result.stdout


def test_background_process_dies_with_the_command(arena):
    marker = arena.ws.candidate / "late"
    marker.unlink(missing_ok=True)
    start = time.monotonic()
    result = shell(
        arena,
        "(sleep 1; echo late > /app/late) > /dev/null 2>&1 & disown; setsid sleep 60 & echo started",
    )
    assert result.stdout.strip() == "started"
    assert time.monotonic() - start < 5
    time.sleep(2.0)
    assert not marker.exists(), "a background process outlived the command"


def test_mount_table_does_not_name_the_task_or_the_run(arena):
    """mountinfo names each bind source within its filesystem: those are neutral slots, not host paths."""
    result = shell(arena, "cat /proc/self/mountinfo /proc/1/mountinfo /proc/self/mounts")
    assert result.returncode == 0 and " /app " in result.stdout, result
    # the sandbox's view of itself is unchanged: the candidate is still writable
    assert shell(arena, "touch /app/presented && rm /app/presented").returncode == 0
    for host in (arena.task.root, arena.run_dir, arena.ws.candidate, arena.ws.source):
        assert str(host) not in result.stdout + result.stderr, (host, result.stdout)
    assert arena.ws.candidate.is_dir() and not arena.ws.candidate.is_symlink()


def test_candidate_git_pointer_does_not_name_the_run(tmp_path):
    """The pointer file the candidate repository leaves in /app shows nothing of the host."""
    from ground.boundary import Limits
    from ground.sandboxes.registry import make_sandbox
    from harness.run.workspace import prepare_workspace, role_boundary
    from task_model.loader import load_task
    from tests.harness.redteam.conftest import make_task

    task = load_task(make_task(tmp_path / "task"))
    ws = prepare_workspace(task, tmp_path / "run" / "workspace")
    (ws.candidate / ".git").write_text(f"gitdir: {tmp_path}/run/candidate.git\n")
    boundary = role_boundary(
        task,
        ws,
        name="migrator",
        write_candidate=True,
        side="candidate",
        audit_log=None,
        limits=Limits(wall_s=20),
    )
    with make_sandbox("bwrap", boundary) as sandbox:
        result = sandbox.exec("cat /app/.git; echo gitdir: /x > /app/.git; echo rc=$?")
    assert str(tmp_path) not in result.stdout and "rc=0" not in result.stdout, result
    assert str(tmp_path) in (ws.candidate / ".git").read_text()
