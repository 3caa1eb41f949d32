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
from task_model.loader import load_task
from harness.cli.app import main
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
