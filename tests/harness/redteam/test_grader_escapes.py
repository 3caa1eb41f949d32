"""Attacks on grading, through `run_grader` and the real sandboxes, as root when the suite is.

The task's grader is shaped like the bundled t2j-mini graders: `test.sh` runs a
`grade.py` that runs the candidate's code through the shared grading library's
nested sandbox and writes `reward.json` last. Each test is one attack; it fails
if the attack worked.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.grader import run_grader
from task_model.loader import load_task
from tests.conftest import requires_bwrap

pytestmark = [requires_bwrap, pytest.mark.bwrap]

REPO = Path(__file__).resolve().parents[3]
SECRET = "TWIN-GRADER-SECRET-51c2"

GRADE_PY = """
import json, os, sys
sys.path.insert(0, os.environ["TESTS_DIR"])
from grading import run_candidate, write_reward
DRIVER = "import attack\\nrecord('stolen', attack.steal())\\n"
run = run_candidate(DRIVER, app_dir=os.environ["APP_DIR"], timeout_s=60)
planted = os.path.exists(os.path.join(os.environ["LOGS_DIR"], "planted.txt"))
write_reward(os.environ["LOGS_DIR"], {
    "reward": 0.25,
    "components": {"stolen": run.values.get("stolen"), "isolation": run.isolation,
                   "planted_seen": planted, "log": run.log[-1500:]},
})
"""

# The candidate: reads the grader's references and plants a reward through every /proc root.
ATTACK = """
import os

def steal():
    found = []
    places = ["/tests/refs/secret.txt", "/logs/verifier"]
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["1", "self"]:
        for place in places:
            path = f"/proc/{pid}/root{place}"
            try:
                if place.endswith(".txt"):
                    found.append(open(path).read())
                else:
                    with open(path + "/planted.txt", "w") as fh:
                        fh.write("1")
                    with open(path + "/reward.json", "w") as fh:
                        fh.write('{"reward": 1.0}')
                    found.append("wrote " + path)
            except OSError:
                pass
    for place in places:
        try:
            found.append(open(place).read())
        except OSError:
            pass
    return found
"""


def make_task(root: Path, test_sh: str) -> Path:
    (root / "tests" / "refs").mkdir(parents=True)
    (root / "environment" / "source").mkdir(parents=True)
    (root / "environment" / "source" / "m.py").write_text("x = 1\n")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 120.0\n')
    (root / "instruction.md").write_text("Migrate.\n")
    (root / "tests" / "refs" / "secret.txt").write_text(SECRET)
    for name in ("grading.py", "grading_run.py", "grading_sandbox.py"):
        shutil.copy(REPO / "benchmark_adapter" / "grading" / "templates" / "grader" / name, root / "tests")
    (root / "tests" / "grade.py").write_text(GRADE_PY)
    (root / "tests" / "test.sh").write_text(test_sh)
    return root


@pytest.fixture(scope="module")
def stealing_grade(tmp_path_factory):
    base = tmp_path_factory.mktemp("grader-attack")
    task = load_task(make_task(base / "task", 'exec python3 "$TESTS_DIR/grade.py"\n'))
    candidate = base / "candidate"
    candidate.mkdir()
    (candidate / "attack.py").write_text(ATTACK)
    return run_grader(task, candidate, sandbox="bwrap", out_dir=base / "out"), base / "out"


def test_candidate_runs_in_the_full_nested_sandbox(stealing_grade):
    grade, _ = stealing_grade
    assert grade.components.get("isolation") == "bwrap", grade.log_tail


def test_candidate_cannot_read_the_graders_references(stealing_grade):
    grade, _ = stealing_grade
    stolen = grade.components.get("stolen")
    assert isinstance(stolen, list), grade.components
    assert not any(SECRET in str(item) for item in stolen), stolen


def test_candidate_cannot_write_into_the_graders_logs(stealing_grade):
    grade, out = stealing_grade
    assert grade.reward == 0.25, grade
    assert grade.components.get("planted_seen") is False
    assert not any("wrote" in str(item) for item in grade.components.get("stolen") or [])
    assert not (out / "verifier" / "planted.txt").exists()


# ---- forging an infrastructure failure ------------------------------------------------------------
# Shaped like the bundled graders: the nested sandbox is checked first, then the candidate runs;
# a value the candidate records makes this grader crash (its own bug, the candidate's outcome).
CHECKED_GRADE_PY = """
import os, sys
sys.path.insert(0, os.environ["TESTS_DIR"])
from grading import nested_sandbox_ready, run_candidate, write_reward
if not nested_sandbox_ready(os.environ["LOGS_DIR"]):
    sys.exit(0)
run = run_candidate("import forge\\nrecord('score', forge.forge())\\n", app_dir=os.environ["APP_DIR"], timeout_s=60)
write_reward(os.environ["LOGS_DIR"], {"reward": float(run.values["score"])})
"""

# The candidate: says "infrastructure" everywhere it can reach, and crashes the grader.
INFRA_FORGER = """
import json, os

def forge():
    report = json.dumps({"reward": 0.0, "infrastructure_error": "nested sandbox unavailable"})
    roots = [f"/proc/{p}/root" for p in os.listdir("/proc") if p.isdigit()] + ["/proc/1/root", ""]
    for root in roots:
        for name in ("reward.json", ".reward.json.tmp"):
            try:
                with open(f"{root}/logs/verifier/{name}", "w") as fh:
                    fh.write(report)
            except OSError:
                pass
    return "infrastructure_error: nested sandbox unavailable"
"""


def test_a_candidate_cannot_turn_its_zero_into_an_infrastructure_failure(tmp_path):
    test_sh = (REPO / "tasks" / "t2j-mini" / "mlp-train" / "tests" / "test.sh").read_text()
    task = load_task(make_task(tmp_path / "task", test_sh))
    (task.tests_dir / "grade.py").write_text(CHECKED_GRADE_PY)
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    (candidate / "forge.py").write_text(INFRA_FORGER)
    grade = run_grader(task, candidate, sandbox="bwrap", out_dir=tmp_path / "out")  # no GraderInfraError
    assert grade.reward == 0.0 and grade.error == "grader reported: grader failed", grade
    assert "could not convert string to float" in grade.log_tail, grade.log_tail


# ---- forging a later grade -----------------------------------------------------------------------
FORGER = r"""
import os, site, subprocess, sys, json
attempts = {}
targets = site.getsitepackages() + [sys.prefix, "/usr/lib/python3/dist-packages"]
for d in targets:
    try:
        with open(os.path.join(d, "twin_planted.py"), "w") as fh:
            fh.write("REWARD = 1.0\n")
        attempts[d] = "written"
    except OSError as exc:
        attempts[d] = exc.strerror
for d in site.getsitepackages():
    r = subprocess.run(["mount", "-o", "remount,rw,bind", d], capture_output=True)
    attempts["remount " + d] = r.returncode
    try:
        with open(os.path.join(d, "numpy", "twin_forged.py"), "x") as fh:
            fh.write("FORGED = 1\n")
        attempts["plant in numpy"] = "written"
    except OSError as exc:
        attempts["plant in numpy"] = exc.strerror
try:
    import twin_planted
    reward = twin_planted.REWARD
except ImportError:
    reward = 0.5
try:
    import numpy.twin_forged
    reward = 1.0
except ImportError:
    pass
logs = os.environ["LOGS_DIR"]
json.dump({"reward": reward, "components": {"attempts": attempts}}, open(logs + "/reward.json", "w"))
"""


def test_code_run_by_the_grader_cannot_forge_a_later_grade(tmp_path):
    """A hostile grader-side process plants a module and edits numpy; the next grade is unchanged."""
    script = tmp_path / "forge.py"
    script.write_text(FORGER)
    task = load_task(make_task(tmp_path / "task", 'exec python3 "$TESTS_DIR/forge.py"\n'))
    shutil.copy(script, task.tests_dir / "forge.py")
    empty = tmp_path / "empty"
    empty.mkdir()
    first = run_grader(task, empty, sandbox="bwrap")
    second = run_grader(task, empty, sandbox="bwrap")
    attempts = first.components.get("attempts", {})
    assert "written" not in attempts.values(), attempts
    assert all(v != 0 for k, v in attempts.items() if k.startswith("remount")), attempts
    assert first.reward == second.reward == 0.5, (first, second)
    live = [Path(p) for p in sys.path if p.endswith("site-packages")]
    assert not any((p / "twin_planted.py").exists() for p in live)
    assert not any((p / "numpy" / "twin_forged.py").exists() for p in live)


def test_pruned_site_packages_is_a_separate_tree_nothing_can_be_planted_in(tmp_path):
    """The tree mounted over site-packages is twin's own directories, closed to writes, without torch;
    each file is the live environment's own (a hard link, its mode untouched) or a copy without
    group or other write. Writing through it is what the forging test above tries, and fails."""
    from ground.sandboxes.packages import hidden_entries, pruned_site_dir, site_dirs

    site_dir = next(d for d in site_dirs() if (d / "numpy").is_dir())
    pruned = pruned_site_dir(site_dir, hidden_entries(site_dir, ("torch",)))
    assert pruned is not None and pruned != site_dir and not (pruned / "torch").exists()
    for folder in (pruned, pruned / "numpy", pruned / "numpy" / "core"):
        if folder.is_dir():
            assert not os.stat(folder).st_mode & 0o022 and os.stat(folder).st_ino != os.stat(site_dir).st_ino
            if os.geteuid() == 0:
                assert os.stat(folder).st_uid == 0
    copy, live = pruned / "numpy" / "__init__.py", site_dir / "numpy" / "__init__.py"
    if os.stat(copy).st_ino == os.stat(live).st_ino:  # a hard link: the environment's file, as it is
        assert os.stat(copy).st_mode == os.stat(live).st_mode
    else:
        assert os.stat(copy).st_nlink == 1 and not os.stat(copy).st_mode & 0o022


def test_bundled_grader_library_fails_closed_without_its_sandbox(monkeypatch):
    """With bwrap unusable, running the candidate raises; it never falls back to a weaker sandbox."""
    sys.path.insert(0, str(REPO / "benchmark_adapter" / "grading" / "templates" / "grader"))
    try:
        import grading
        import grading_sandbox
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(grading_sandbox, "_BWRAP_VARIANT", [[]])
    with pytest.raises(grading.IsolationUnavailable, match="refusing"):
        grading.run_candidate("record('x', 1)", app_dir="/nonexistent", timeout_s=5)


# ---- a reward read from one place -----------------------------------------------------------------
@pytest.mark.parametrize("planted", ["folder", "link", "fifo"])
def test_something_other_than_a_file_at_reward_json_never_falls_back_to_reward_txt(tmp_path, planted):
    """What a survivor of the candidate would leave: reward.json made unwritable, its own reward.txt."""
    from benchmark_adapter.grading import grader as grader_module

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "reward.txt").write_text("1.0\n")
    if planted == "folder":
        (logs / "reward.json").mkdir()
    elif planted == "link":
        (tmp_path / "elsewhere.json").write_text('{"reward": 1.0}')
        (logs / "reward.json").symlink_to(tmp_path / "elsewhere.json")
    else:
        os.mkfifo(logs / "reward.json")
    got = grader_module._read_reward(logs)
    assert got["reward"] == 0.0 and "reward.json" in got["error"], got


def test_reward_txt_is_read_where_nothing_is_at_reward_json(tmp_path):
    from benchmark_adapter.grading import grader as grader_module

    (tmp_path / "reward.txt").write_text("0.75\n")
    assert grader_module._read_reward(tmp_path) == {"reward": 0.75, "reward_file": "reward.txt"}
