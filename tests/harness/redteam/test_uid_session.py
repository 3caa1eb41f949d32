"""The grading library's uid drop is a session boundary: nothing of one candidate run outlives it.

In a default Docker container the bundled graders run the candidate as `CANDIDATE_UID`
(`grading_run.run_candidate`, isolation "uid"), once per case. A candidate that leaves a
`setsid` process behind must not reach a later case, the grader's own steps or the reward, and
a process holding the driver's output pipe must not hold the grader past its time limit.

Each test runs the library as root in a PID namespace of its own (`unshare`), as a container
would: ending the uid's processes there touches no other test's. The same attacks through
`run_grader` in Docker are in `tests/ground/sandboxes/test_docker_grader.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LIBRARY = REPO / "benchmark_adapter" / "grading" / "templates" / "grader"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare (a PID namespace)"
)

# Runs in the namespace: the cases of one grade, then what the grader sees afterwards.
GRADER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import grading
from grading_sandbox import CANDIDATE_UIDS

def alive():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) in CANDIDATE_UIDS and not fields["State"].strip().startswith("Z"):
            found.append(pid)
    return found

def case(driver, timeout_s):
    run = grading.run_candidate(driver, app_dir="/nonexistent", timeout_s=timeout_s, isolation="uid")
    return {"values": {k: v for k, v in run.values.items() if not k.startswith("__")},
            "timed_out": run.timed_out, "duration_s": run.duration_s, "alive_after": alive(),
            "finished": run.finished, "returncode": run.returncode, "log": run.log[-500:]}

cases = json.loads(sys.argv[2])
if sys.argv[3] == "together":  # as a grader's thread pool runs them
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        out = list(pool.map(lambda c: case(*c), cases))
else:
    out = [case(*c) for c in cases]
time.sleep(1.0)  # a survivor would have written by now
out.append({"alive_at_end": alive()})
print(json.dumps(out))
"""

# Case 1 leaves a daemon in a session of its own, its output closed; it keeps a heartbeat in /tmp
# and plants a link in every scratch folder it can enter.
DAEMON = r'''
import subprocess, sys
code = """
import glob, os, time
while True:
    with open("/tmp/t2j-daemon-heartbeat", "w") as fh:
        fh.write(str(time.time()))
    for scratch in glob.glob("/tmp/t2j-run-*"):
        try:
            os.symlink("/etc", os.path.join(scratch, "planted"))
        except OSError:
            pass
    time.sleep(0.05)
"""
subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
record("spawned", True)
'''

# A later case: what of the earlier one it still finds.
LATER = r"""
import os, time
time.sleep(0.5)
record("planted", os.path.lexists(os.path.join(_SCRATCH, "planted")))
try:
    record("heartbeat_age", time.time() - float(open("/tmp/t2j-daemon-heartbeat").read()))
except (OSError, ValueError):
    record("heartbeat_age", None)
"""

# A child in a session of its own holds the driver's stdout; the driver exits (or sleeps on).
HOLDER = r"""
import subprocess, time
subprocess.Popen(["sleep", "40"], start_new_session=True)
record("spawned", True)
"""


def interpreter_in_reach() -> str:
    """Shell lines that, in the namespace's own mounts, let the candidate's uid run this interpreter.

    An interpreter under `/root` (pyenv) is out of its reach: a stand-in `/root` holds twin's
    reachable copy of it at the same path (what twin's own sandboxes mount, `python_mounts`).
    """
    from ground.isolation import python_mounts

    lines = []
    for mount in python_mounts():
        inside = Path(mount.inside)
        if mount.host != inside and inside.is_relative_to("/root"):
            lines += [f'mkdir -p "$stand_in/{inside.relative_to("/root")}"',
                      f'mount --bind "{mount.host}" "$stand_in/{inside.relative_to("/root")}"']  # fmt: skip
    if not lines:
        return ""
    return "\n".join(['stand_in=$(mktemp -d)', 'chmod 755 "$stand_in"', *lines, 'mount --rbind "$stand_in" /root'])


def run_cases(cases: list[tuple[str, float]], *, together: bool = False, limit_s: float = 120) -> list[dict]:
    script = f'{interpreter_in_reach()}\nexec "$@"'
    command = [sys.executable, "-c", GRADER, str(LIBRARY), json.dumps(cases), "together" if together else "one-by-one"]
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-ec", script, "bash", *command]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit_s, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_setsid_daemon_does_not_outlive_its_case_nor_reach_a_later_one():
    first, later, end = run_cases([(DAEMON, 30), (LATER, 30)])
    assert first["values"] == {"spawned": True} and first["finished"], first
    assert first["alive_after"] == [], first  # ended with the run that left it
    assert later["finished"] and later["values"]["planted"] is False, later
    age = later["values"]["heartbeat_age"]
    assert age is None or age > 0.5, later  # no heartbeat written while the later case ran
    assert end["alive_at_end"] == []


# Leaves many processes, each holding memory the kernel must free when it dies: SIGKILL is sent at
# once, but taken one process at a time.
CROWD = r"""
import subprocess, sys
code = "import time\nheld = bytearray(64 * 1024 * 1024)\nprint(flush=True)\ntime.sleep(300)\n"
crowd = [subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for _ in range(24)]
for proc in crowd:
    proc.stdout.readline()  # its memory is held
record("spawned", len(crowd))
"""


def test_a_run_ends_only_when_every_process_it_left_has_died():
    """The boundary is the processes gone, not SIGKILL sent: none of a crowd is still running after the case."""
    first, end = run_cases([(CROWD, 60)])
    assert first["values"] == {"spawned": 24} and first["finished"], first
    assert first["alive_after"] == [], first
    assert end["alive_at_end"] == []


def test_a_child_holding_the_output_pipe_does_not_keep_a_finished_case_running():
    (run, _end) = run_cases([(HOLDER, 20)])
    assert run["values"] == {"spawned": True} and run["finished"], run
    assert not run["timed_out"] and run["duration_s"] < 10, run


def test_a_child_holding_the_output_pipe_does_not_stretch_the_time_limit():
    (run, _end) = run_cases([(HOLDER + "time.sleep(40)\n", 3)])
    assert run["timed_out"] and run["duration_s"] < 3 + 8, run
    assert _end["alive_at_end"] == []


def test_runs_made_at_the_same_time_do_not_end_each_other():
    """A grader's thread pool runs two cases at once: the short one ending kills nothing of the long one."""
    slow = "import time\ntime.sleep(3)\nrecord('slow', True)\n"
    quick = "record('quick', True)\n"
    slow_run, quick_run, end = run_cases([(slow, 30), (quick, 30)], together=True)
    assert slow_run["finished"] and slow_run["values"] == {"slow": True}, slow_run
    assert quick_run["finished"] and quick_run["values"] == {"quick": True}, quick_run
    assert end["alive_at_end"] == []


def test_the_scratch_is_handed_over_without_following_a_link(tmp_path):
    """Root chowns the scratch through descriptors: a link in it hands its target to no one."""
    sys.path.insert(0, str(LIBRARY))
    try:
        import grading_sandbox
    finally:
        sys.path.pop(0)
    scratch, target = tmp_path / "scratch", tmp_path / "logs"
    scratch.mkdir(mode=0o700)
    target.mkdir(mode=0o700)
    (scratch / "driver.py").write_text("")
    (scratch / "sub").mkdir()
    (scratch / "sub" / "to-logs").symlink_to(target)
    (scratch / "to-logs").symlink_to(target)
    uid = grading_sandbox.CANDIDATE_UID
    grading_sandbox.hand_scratch_to_candidate(scratch, uid)
    assert os.stat(scratch).st_uid == uid and os.stat(scratch / "sub" / "to-logs", follow_symlinks=False).st_uid == uid
    assert os.stat(target).st_uid == 0 and (os.stat(scratch).st_mode & 0o777) == 0o700
