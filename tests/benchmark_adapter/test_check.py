"""`twin task check` and the check before a run; grading a task whose files are 0600/0700 (as Harbor would)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading import check as check_module
from benchmark_adapter.grading.check import check_task, ensure_task_checked, task_content_hash
from benchmark_adapter.grading.defects import Defect
from benchmark_adapter.grading.grader import Grade
from harness.cli.app import main
from task_model.loader import load_task

requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
REPO = Path(__file__).resolve().parents[2]

# A grader that reads its references (a 0600 file in a 0700 folder) and runs the candidate's main.py.
GRADER = r"""#!/usr/bin/env bash
set -u
TESTS_DIR="${TESTS_DIR:-/tests}"; APP_DIR="${APP_DIR:-/app}"; LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
python3 - <<'PY'
import json, os, subprocess, sys, traceback
logs = os.environ["LOGS_DIR"]
try:
    expected = open(os.path.join(os.environ["TESTS_DIR"], "refs", "refs.txt")).read().strip()
    main = os.path.join(os.environ["APP_DIR"], "main.py")
    if not os.path.exists(main):
        reward, error = 0.0, None
    else:
        run = subprocess.run([sys.executable, main], capture_output=True, text=True)
        sys.stderr.write(run.stderr)
        reward, error = (1.0 if run.stdout.strip() == expected else 0.0), None
        if run.returncode != 0:
            error = "the candidate raised"
except Exception:
    traceback.print_exc()
    reward, error = 0.0, "grader failed"
json.dump({"reward": reward, "error": error}, open(os.path.join(logs, "reward.json"), "w"))
PY
"""


def make_task(root: Path, *, oracle: str = "print(42)\n", name: str = "modes") -> Path:
    """A task as `numpy.savez` and a careful author leave it: references 0600 in a 0700 folder, original 0700."""
    task = root / name
    (task / "environment" / "source").mkdir(parents=True)
    (task / "environment" / "source" / "main.py").write_text("print(42)\n")
    (task / "tests" / "refs").mkdir(parents=True)
    (task / "tests" / "refs" / "refs.txt").write_text("42\n")
    (task / "tests" / "test.sh").write_text(GRADER)
    (task / "solution" / "app").mkdir(parents=True)
    (task / "solution" / "app" / "main.py").write_text(oracle)
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n')
    (task / "instruction.md").write_text("Port main.py.\n")
    (task / "tests" / "refs" / "refs.txt").chmod(0o600)
    (task / "solution" / "app" / "main.py").chmod(0o600)
    for folder in ("tests/refs", "tests", "environment/source", "solution/app", "solution"):
        (task / folder).chmod(0o700)
    (task / "tests" / "test.sh").chmod(0o700)
    return task


def broken_copy(root: Path) -> Path:
    return make_task(root, oracle='raise RuntimeError("oracle broken 4711")\n', name="broken")


@pytest.fixture()
def check_cache(tmp_path, monkeypatch):
    """Remembered checks go to a fresh folder (the rest of twin's cache is shared: copying the
    interpreter anew would cost seconds); the check is not skipped."""
    folder = tmp_path / "cache" / "task-checks"
    monkeypatch.setattr(check_module, "_passed_marker", lambda h, s: folder / f"{h}-{s}.json")
    monkeypatch.delenv("TWIN_SKIP_TASK_CHECK", raising=False)
    return tmp_path / "cache"


@requires_bwrap
def test_oracle_of_a_0600_0700_task_grades_full_through_twin_grade(tmp_path, capsys):
    task = make_task(tmp_path)
    out = tmp_path / "g.json"
    assert main(["grade", "--task", str(task), "--oracle", "--sandbox", "bwrap", "--out", str(out)]) == 0
    assert json.loads((tmp_path / "g.json").read_text())["reward"] == 1.0
    assert oct(os.stat(task / "tests" / "refs" / "refs.txt").st_mode & 0o777) == "0o600"  # the task is untouched


@requires_bwrap
def test_task_check_passes_a_good_task(tmp_path, check_cache, capsys):
    assert main(["task", "check", str(make_task(tmp_path)), "--sandbox", "bwrap"]) == 0
    out = capsys.readouterr().out
    assert "oracle" in out and "empty candidate" in out and "FAILED" not in out


@requires_bwrap
def test_task_check_fails_naming_the_oracle_with_the_graders_own_error(tmp_path, check_cache, capsys):
    assert main(["task", "check", str(broken_copy(tmp_path)), "--sandbox", "bwrap"]) != 0
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "oracle broken 4711" in captured.out  # the grader's stderr tail
    assert "the candidate raised" in captured.out  # its details file's error field
    assert "check failed (oracle)" in captured.err


@requires_bwrap
def test_migrate_on_a_broken_task_stops_with_the_checks_line_and_grades_nothing(tmp_path, check_cache, capsys):
    """The check runs beside the run's start: whichever ends first, the run stops on the check, ungraded."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "submit", "arguments": {"summary": "nothing"}}]}]))
    runs = tmp_path / "runs"
    code = main(["migrate", "--task", str(broken_copy(tmp_path)), "--model", f"scripted:{script}", "--scaffold",
                 "base", "--rounds", "1", "--sandbox", "bwrap", "--runs-dir", str(runs)])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "check failed (oracle)" in err and "the run stops" in err
    assert "task check of broken: oracle reward 0.0000 (expected >= 0.97) FAILED" in err  # said as it came
    (run,) = runs.iterdir()
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "stopped" and state["stop_reason"].startswith("task check failed:")
    assert not (run / "grades.json").exists()  # nothing is graded on a task whose grader fails its oracle


def test_skipping_the_check_says_so_loudly(tmp_path, check_cache, capsys, monkeypatch):
    monkeypatch.setattr(check_module, "check_task", lambda *a, **k: pytest.fail("the check ran"))
    from harness.cli.task import check_before_run

    check_before_run(load_task(broken_copy(tmp_path)), "none", skip=True)
    assert "task check of broken is skipped" in capsys.readouterr().err


def _grade(reward: float, error: str | None = None) -> Grade:
    return Grade(task="t", candidate="c", reward=reward, returncode=0, duration_s=0.0, sandbox="none", error=error)


def test_check_is_remembered_per_content_and_sandbox(tmp_path, check_cache, monkeypatch):
    task = load_task(make_task(tmp_path))
    calls: list[str] = []

    def fake_check(t, *, sandbox, defects=None, grade_fn=None, content_hash=None, **options):
        calls.append(sandbox)
        return check_module.TaskCheck(task=t.name, content_hash=task_content_hash(t), sandbox=sandbox, rows=[
            check_module.CheckRow(name="oracle", expected=">= 0.97", reward=1.0, passed=True)])  # fmt: skip

    monkeypatch.setattr(check_module, "check_task", fake_check)
    assert ensure_task_checked(task, "bwrap") is not None
    assert ensure_task_checked(task, "bwrap") is None  # remembered
    assert ensure_task_checked(task, "docker") is not None  # another sandbox kind is checked again
    (task.root / "tests" / "test.sh").write_text(GRADER + "\n# edited\n")
    assert ensure_task_checked(task, "bwrap") is not None  # edited content is checked again
    assert calls == ["bwrap", "docker", "bwrap"]


def test_a_failed_check_is_not_remembered(tmp_path, check_cache):
    task = load_task(make_task(tmp_path))
    grades = iter([_grade(0.5), _grade(0.0)] * 2)
    result = check_task(task, grade_fn=lambda t, c: next(grades), parallel=False)
    assert not result.passed and result.failure_line().startswith("task modes: check failed (oracle)")


@pytest.mark.parametrize(
    ("rewards", "failed"),
    [
        ([1.0, 0.9999, 0.0], []),  # oracle, defect, empty: all as expected
        ([1.0, 1.0, 0.0], ["defect d"]),  # the defect slips through
        ([1.0, 0.2, 0.3], ["empty candidate"]),  # an empty candidate scores
        ([0.9, 0.2, 0.0], ["oracle"]),  # the oracle falls short of 0.97
    ],
)
def test_rows_fail_where_the_grader_is_wrong(tmp_path, rewards, failed):
    task = load_task(make_task(tmp_path))
    grades = iter(_grade(r) for r in rewards)
    defect = Defect(name="d", file="main.py", old="42", new="43", component="main")
    result = check_task(task, defects=[defect], grade_fn=lambda t, c: next(grades), parallel=False)
    assert [r.name for r in result.rows] == ["oracle", "empty candidate", "defect d"]
    assert [r.name for r in result.rows if not r.passed] == failed


def test_an_oracle_grade_with_an_error_field_fails(tmp_path):
    task = load_task(make_task(tmp_path))
    grades = iter([_grade(1.0, error="grader reported: refs unreadable"), _grade(0.0)])
    result = check_task(task, grade_fn=lambda t, c: next(grades), parallel=False)
    assert not result.rows[0].passed and "refs unreadable" in result.failure_line()


@requires_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become another user")
def test_oracle_grades_full_as_a_non_root_user(tmp_path):
    """twin run by an ordinary user who owns the 0600/0700 task (setpriv makes this test that user)."""
    from ground.isolation import reachable

    for needed in (Path(sys.base_prefix).resolve() / "bin", Path(sys.prefix) / "bin", REPO):
        if not reachable(needed, 4242, 4242):  # e.g. a checkout under /root
            pytest.skip(f"{needed} is closed to an ordinary user")
    base = Path("/var/tmp") / f"twin-user-test-{os.getpid()}"
    base.mkdir(mode=0o755)
    try:
        task = make_task(base)
        home = base / "home"
        home.mkdir()
        for path in [base, *base.rglob("*")]:
            os.chown(path, 4242, 4242, follow_symlinks=False)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TWIN_STAGE_DIR": str(home / "stage")}
        argv = ["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", sys.executable, "-m", "harness.cli.app",
                "grade", "--task", str(task), "--oracle", "--sandbox", "bwrap",
                "--out", str(home / "g.json")]  # fmt: skip
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        if "setting up uid map" in proc.stderr or "No permissions to create new namespace" in proc.stderr:
            pytest.skip("unprivileged user namespaces are not available to an ordinary user here")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads((home / "g.json").read_text())["reward"] == 1.0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _port_script(tmp_path: Path) -> str:
    calls = [
        {"name": "write_file", "arguments": {"path": "/app/main.py", "content": "print(42)\n"}},
        {"name": "submit", "arguments": {"summary": "ported"}},
    ]
    replies = [{"tool_calls": [c], "usage": {"prompt_tokens": 10, "completion_tokens": 5}} for c in calls]
    (tmp_path / "port.json").write_text(json.dumps(replies))
    return f"scripted:{tmp_path / 'port.json'}"


@requires_bwrap
@pytest.mark.heavy
def test_migrate_and_bench_check_then_grade_a_0600_0700_task_in_full(tmp_path, check_cache, capsys):
    task, model = make_task(tmp_path), _port_script(tmp_path)
    runs = tmp_path / "runs"
    code = main(["migrate", "--task", str(task), "--model", model, "--scaffold", "base", "--rounds", "1",
                 "--sandbox", "bwrap", "--runs-dir", str(runs), "--run-id", "r"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "checking modes once" in captured.err  # the check ran (and passed) before the run
    assert json.loads((runs / "r" / "grades.json").read_text())["rounds"][0]["reward"] == 1.0
    assert list((check_cache / "task-checks").glob("*-bwrap.json"))  # remembered for the next run
    benches = tmp_path / "benches"
    assert main(["bench", "--tasks", str(task), "--model", model, "--scaffold", "base", "--rounds", "1",
                 "--sandbox", "bwrap", "--benches-dir", str(benches), "--name", "b", "--no-report"]) == 0  # fmt: skip
    results = json.loads((benches / "b" / "results.json").read_text())
    (trial,) = results["trials"].values()
    assert trial["status"] == "ok" and list(trial["rewards"].values()) == [1.0]


@requires_bwrap
def test_the_check_a_bench_waits_for_stops_before_any_model_call_saying_each_row(tmp_path, check_cache, capsys):
    from benchmark_adapter.grading.check import TaskCheckFailed
    from harness.cli.task import check_before_run

    with pytest.raises(TaskCheckFailed, match="check failed \\(oracle.*before any model call"):
        check_before_run(load_task(broken_copy(tmp_path)), "bwrap", skip=False)
    err = capsys.readouterr().err
    assert "task check of broken: oracle reward 0.0000 (expected >= 0.97) FAILED" in err


def _timed(reward: float, seconds: float) -> Grade:
    return Grade(task="t", candidate="c", reward=reward, returncode=0, duration_s=seconds, sandbox="none")


def test_a_grade_over_half_the_verifiers_timeout_is_warned_of_with_its_figure():
    assert check_module.slow_grade_warning(30.0, 60.0) is None  # half is not over half
    warning = check_module.slow_grade_warning(51.0, 60.0)
    assert warning.startswith("warning: the oracle's grade took 51 s, 85% of the verifier's timeout (60 s")


@pytest.mark.parametrize(("oracle_s", "warned"), [(40.0, True), (20.0, False)])
def test_the_check_warns_when_its_oracle_took_over_half_the_timeout(tmp_path, capsys, monkeypatch, oracle_s, warned):
    task = make_task(tmp_path)  # [verifier] timeout_sec = 60
    grades = iter([_timed(1.0, oracle_s), _timed(0.0, 50.0)])  # the empty candidate's time is not the oracle's
    real = check_module.check_task
    monkeypatch.setattr(
        "harness.cli.task.check_task", lambda t, **k: real(t, grade_fn=lambda *_: next(grades), parallel=False)
    )
    assert main(["task", "check", str(task), "--sandbox", "none"]) == 0
    err = capsys.readouterr().err
    assert ("warning: the oracle's grade took 40 s, 67% of the verifier's timeout (60 s" in err) == warned
    assert ("warning" in err) == warned


def test_twins_own_defects_go_to_the_bundled_task_folder_only_never_to_a_name(tmp_path):
    from benchmark_adapter.grading.check import default_defects

    bundled = load_task(REPO / "tasks" / "t2j-mini" / "mlp-train")
    assert default_defects(bundled) == REPO / "tests" / "benchmark_adapter" / "defects" / "mlp_train.py"
    copy = tmp_path / "mlp-train"
    shutil.copytree(REPO / "tasks" / "t2j-mini" / "mlp-train", copy)
    assert default_defects(load_task(copy)) is None  # a copy elsewhere: `--defects` gives it a list
    mine = tmp_path / "my-resnet"
    shutil.copytree(REPO / "tasks" / "t2j-mini" / "mlp-train", mine)  # its task.toml keeps name = "mlp-train"
    task = load_task(mine)
    assert task.name == "mlp-train" and default_defects(task) is None  # named like a bundled task
