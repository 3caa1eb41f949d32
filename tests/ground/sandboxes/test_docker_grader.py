"""Graders in twin's docker sandbox, as Harbor runs them: root in the container, the candidate's side under
a dropped uid where the nested bubblewrap cannot start (needs a Docker engine; skips in one line without one)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from benchmark_adapter.grading.grader import oracle_copy, run_grader
from harness.cli.app import main
from task_model.loader import load_task
from tests.benchmark_adapter.test_check import make_task
from tests.conftest import docker_engine

REPO = Path(__file__).resolve().parents[3]
TINY_NET = REPO / "tasks" / "published" / "tiny-net"

pytestmark = [
    pytest.mark.skipif(not docker_engine(), reason="no Docker engine here"),
    pytest.mark.skipif(os.geteuid() != 0, reason="twin runs the grader's container as root only when it is root"),
]

# Stops the port unless it can reach the grader's files: a candidate that could would pass.
CHEAT = '''import os as _os
for _p in PATHS:
    try:
        _os.listdir(_p)
    except OSError:
        raise SystemExit("cannot reach " + _p)
'''


@pytest.mark.heavy
def test_a_0600_0700_task_grades_its_oracle_in_docker(tmp_path):
    task = make_task(tmp_path)
    out = tmp_path / "g.json"
    assert main(["grade", "--task", str(task), "--oracle", "--sandbox", "docker", "--out", str(out)]) == 0
    assert json.loads((tmp_path / "g.json").read_text())["reward"] == 1.0


@pytest.mark.heavy
def test_generated_grader_drops_the_candidate_and_the_references_stay_out_of_reach(tmp_path):
    task = load_task(TINY_NET)
    with oracle_copy(task) as oracle:
        good = run_grader(task, oracle, sandbox="docker", out_dir=tmp_path / "good")
        cheat = tmp_path / "cheat"
        shutil.copytree(oracle, cheat)
    control = tmp_path / "control"
    shutil.copytree(cheat, control)
    for tree, paths in ((cheat, ("/tests", "/tests/refs", "/logs/verifier")), (control, ("/usr", "/tmp"))):
        init = tree / "tiny_net" / "__init__.py"
        init.write_text(CHEAT.replace("PATHS", repr(paths)) + init.read_text())
    details = json.loads((tmp_path / "good" / "verifier" / "reward.json").read_text())
    assert good.reward >= 0.97 and details["meta"]["isolation"] == "uid", good.log_tail[-2000:]
    assert run_grader(task, control, sandbox="docker").reward >= 0.97  # what it can reach, it lists
    bad = run_grader(task, cheat, sandbox="docker")
    assert bad.reward == 0.0, bad.log_tail[-2000:]


@pytest.mark.heavy
def test_the_redteam_attack_gains_nothing_under_the_uid_drop(tmp_path):
    """tests/harness/redteam's candidate (references through every /proc root, a planted reward), in docker."""
    from tests.harness.redteam.test_grader_escapes import ATTACK, SECRET
    from tests.harness.redteam.test_grader_escapes import make_task as attack_task

    task = load_task(attack_task(tmp_path / "task", 'exec python3 "$TESTS_DIR/grade.py"\n'))
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    (candidate / "attack.py").write_text(ATTACK)
    grade = run_grader(task, candidate, sandbox="docker", out_dir=tmp_path / "out")
    stolen = grade.components.get("stolen")
    assert grade.components.get("isolation") == "uid" and isinstance(stolen, list), grade.log_tail[-2000:]
    assert not any(SECRET in str(item) or "wrote" in str(item) for item in stolen), stolen
    assert grade.reward == 0.25 and grade.components.get("planted_seen") is False
    assert not (tmp_path / "out" / "verifier" / "planted.txt").exists()


def harbor_run(task_dir: Path, tmp_path: Path, *, prepend: str = "") -> dict:
    """`tests/test.sh` as Harbor runs it: root in a default container (Docker's seccomp profile and
    capabilities, no user namespaces), tests/ a writable copy; the host's interpreter mounted in."""
    import sys

    from ground.isolation import python_mounts

    task = load_task(task_dir)
    work = Path(tempfile.mkdtemp(prefix="harbor-", dir="/var/tmp"))
    try:
        shutil.copytree(task.tests_dir, work / "tests")
        (work / "logs").mkdir()
        with oracle_copy(task) as oracle:
            shutil.copytree(oracle, work / "app")
        init = sorted((work / "app").rglob("__init__.py"))[0]
        init.write_text(prepend + init.read_text())
        mounts = [m for m in python_mounts() if m.inside not in ("/etc", "/sbin")]
        volumes = {str(m.host): {"bind": m.inside, "mode": "ro"} for m in mounts}
        etc = ("passwd", "group", "ld.so.cache")
        volumes.update({f"/etc/{e}": {"bind": f"/etc/{e}", "mode": "ro"} for e in etc})
        volumes[str(work / "tests")] = {"bind": "/tests", "mode": "rw"}
        volumes[str(work / "logs")] = {"bind": "/logs/verifier", "mode": "rw"}
        volumes[str(work / "app")] = {"bind": task.settings.candidate_mount, "mode": "rw"}
        volumes.update({str(laid.host): {"bind": laid.inside, "mode": "ro"} for laid in task.extra_layout})
        if task.assets_dir is not None:
            volumes[str(task.assets_dir)] = {"bind": task.settings.assets_mount, "mode": "ro"}
        from ground.sandboxes.docker_engine import client as docker_client
        from ground.sandboxes.docker_engine import ensure_base_image

        client = docker_client()
        container = client.containers.run(
            ensure_base_image(client), ["bash", "/tests/test.sh"], detach=True, user="0:0", network_mode="none",
            volumes=volumes, working_dir="/tests", tmpfs={"/tmp": "rw,size=1g"},
            environment={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        )  # fmt: skip
        try:
            container.wait(timeout=600)
        finally:
            container.remove(force=True)
        return json.loads((work / "logs" / "reward.json").read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.heavy
def test_the_generated_grader_runs_as_harbor_runs_it_and_keeps_tests_from_the_candidate(tmp_path):
    good = harbor_run(TINY_NET, tmp_path)
    assert good["reward"] >= 0.97 and good["meta"]["isolation"] == "uid", json.dumps(good)[-3000:]
    cheat = harbor_run(TINY_NET, tmp_path, prepend='import os\nos.listdir("/tests")\n')
    assert cheat["reward"] == 0.0 and cheat["meta"]["isolation"] == "uid", cheat


BUNDLED = [
    REPO / "tasks" / "t2j-mini" / "mlp-train",
    REPO / "tasks" / "t2j-mini" / "llama-lora-sft",
    REPO / "tasks" / "t2j-mini" / "llama-paged-serve",
    REPO / "tasks" / "flask-to-starlette",
    TINY_NET,
]


@pytest.mark.heavy
@pytest.mark.parametrize("task_dir", BUNDLED, ids=lambda p: p.name)
def test_every_bundled_oracle_grades_in_full_in_docker(task_dir, tmp_path):
    task = load_task(task_dir)
    with oracle_copy(task) as oracle:
        grade = run_grader(task, oracle, sandbox="docker", out_dir=tmp_path / "out")
    details = json.loads((tmp_path / "out" / "verifier" / "reward.json").read_text())
    assert grade.reward >= 0.97 and grade.error is None, grade.log_tail[-2000:]
    assert "uid" in json.dumps(details), details  # the candidate's side was dropped, as the details say


# The first case leaves a daemon in a session of its own that goes after the grader's later steps:
# links in every scratch folder to the grader's logs, reward.json made a folder, its own reward.txt.
SESSION_GRADE_PY = r'''
import os, sys, time
sys.path.insert(0, os.environ["TESTS_DIR"])
from grading import run_candidate, write_reward
from grading_sandbox import CANDIDATE_UIDS

def survivors():
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":" in l)
        except OSError:
            continue
        found += int(fields["Uid"].split()[0]) in CANDIDATE_UIDS and not fields["State"].strip().startswith("Z")
    return found

app = os.environ["APP_DIR"]
first = run_candidate("import daemon\ndaemon.start()\nrecord('case', 1)\n", app_dir=app, timeout_s=60)
left = survivors()
later = [run_candidate("import time\ntime.sleep(0.3)\nrecord('case', 2)\n", app_dir=app, timeout_s=60)
         for _ in range(3)]
time.sleep(1.0)
write_reward(os.environ["LOGS_DIR"], {"reward": 0.25, "components": {
    "isolation": first.isolation, "survivors": [left, survivors()],
    "cases": [first.values.get("case")] + [r.values.get("case") for r in later]}})
'''

DAEMON = r'''
import os, subprocess, sys

CODE = """
import glob, os, time
logs = "/logs/verifier"
end = time.time() + 120
while time.time() < end:
    for scratch in glob.glob("/tmp/t2j-run-*"):
        try:
            os.symlink(logs, os.path.join(scratch, "zz-logs"))
        except OSError:
            pass
    try:
        with open(os.path.join(logs, "reward.txt"), "w") as fh:
            fh.write("1.0")
        os.makedirs(os.path.join(logs, "reward.json"), exist_ok=True)
    except OSError:
        pass
    time.sleep(0.01)
"""

def start():
    subprocess.Popen([sys.executable, "-c", CODE], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''


@pytest.mark.heavy
def test_a_setsid_daemon_left_by_one_case_reaches_no_later_case_nor_the_reward(tmp_path):
    from tests.harness.redteam.test_grader_escapes import make_task as attack_task

    task = load_task(attack_task(tmp_path / "task", 'exec python3 "$TESTS_DIR/grade.py"\n'))
    (task.tests_dir / "grade.py").write_text(SESSION_GRADE_PY)
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    (candidate / "daemon.py").write_text(DAEMON)
    grade = run_grader(task, candidate, sandbox="docker", out_dir=tmp_path / "out")
    assert grade.reward == 0.25 and grade.error is None, (grade, grade.log_tail[-2000:])
    assert grade.components.get("isolation") == "uid", grade.components
    assert grade.components.get("survivors") == [0, 0], grade.components
    assert grade.components.get("cases") == [1, 2, 2, 2], grade.components
    assert not (tmp_path / "out" / "verifier" / "reward.txt").exists()


# A case whose driver leaves a child holding its output and sleeps past its 5 s limit.
HOLDER_GRADE_PY = r'''
import os, sys
sys.path.insert(0, os.environ["TESTS_DIR"])
from grading import run_candidate, write_reward
driver = "import subprocess, time\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\ntime.sleep(300)\n"
run = run_candidate(driver, app_dir=os.environ["APP_DIR"], timeout_s=5)
write_reward(os.environ["LOGS_DIR"], {"reward": 0.25, "components": {
    "isolation": run.isolation, "timed_out": run.timed_out, "run_s": run.duration_s}})
'''


@pytest.mark.heavy
def test_a_child_holding_the_output_pipe_does_not_stretch_a_cases_time_limit(tmp_path):
    from tests.harness.redteam.test_grader_escapes import make_task as attack_task

    root = attack_task(tmp_path / "task", 'exec python3 "$TESTS_DIR/grade.py"\n')
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n')
    task = load_task(root)
    (task.tests_dir / "grade.py").write_text(HOLDER_GRADE_PY)
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    grade = run_grader(task, candidate, sandbox="docker", out_dir=tmp_path / "out")
    assert grade.reward == 0.25, (grade, grade.log_tail[-2000:])
    assert grade.components["isolation"] == "uid" and grade.components["timed_out"] is True, grade.components
    assert grade.components["run_s"] < 5 + 10, grade.components
