"""run_grader and `twin grade` on small synthetic tasks (the real task: test_mlp_train.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.grader import Grade, GraderError, oracle_copy, run_grader
from harness.cli.app import main
from task_model.loader import load_task

requires_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap not installed"
)

# A grader that proves its own conditions: empty logs at start, no torch, the solution unseen.
PROBING_TEST_SH = r"""#!/usr/bin/env bash
set -u
LOGS_DIR="${LOGS_DIR:-/logs/verifier}"
empty=1; [ -z "$(ls -A "$LOGS_DIR")" ] || empty=0
python3 -c "import torch" 2>/dev/null && torch=1 || torch=0
[ -e "$APP_DIR/answer.txt" ] && app=1 || app=0
cat > "$LOGS_DIR/reward.json" <<JSON
{"reward": 0.75, "components": {"empty_logs": $empty, "torch": $torch, "app": $app,
 "solution_visible": $( [ -e /solution ] || [ -e "$TESTS_DIR/../solution" ] && echo 1 || echo 0 )},
 "checks": {"c1": {"score": 0.5, "aspect": "numeric"}}}
JSON
"""


def make_task(root: Path, test_sh: str, *, name: str = "fake") -> Path:
    task = root / name
    (task / "environment" / "source").mkdir(parents=True)
    (task / "environment" / "assets").mkdir()
    (task / "tests").mkdir()
    (task / "solution" / "app").mkdir(parents=True)
    (task / "solution" / "app" / "answer.txt").write_text("oracle")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n')
    (task / "instruction.md").write_text("Do it.\n")
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "tests" / "test.sh").chmod(0o755)
    return task


@pytest.fixture()
def candidate(tmp_path) -> Path:
    app = tmp_path / "candidate"
    app.mkdir()
    (app / "answer.txt").write_text("42")
    return app


@requires_bwrap
def test_grader_runs_in_fresh_sandbox_and_reward_json_is_read(tmp_path, candidate):
    task = load_task(make_task(tmp_path, PROBING_TEST_SH))
    grade = run_grader(task, candidate, sandbox="bwrap", out_dir=tmp_path / "out")
    assert isinstance(grade, Grade)
    assert grade.reward == 0.75 and grade.error is None and grade.reward_file == "reward.json"
    assert grade.components == {"empty_logs": 1, "torch": 0, "app": 1, "solution_visible": 0}
    assert grade.checks["c1"]["score"] == 0.5
    assert grade.returncode == 0 and not grade.timed_out
    kept = json.loads((tmp_path / "out" / "grade.json").read_text())
    assert kept["reward"] == 0.75 and kept["schema_version"] == 1
    assert (tmp_path / "out" / "verifier" / "reward.json").is_file()


@requires_bwrap
def test_reward_txt_is_the_fallback(tmp_path, candidate):
    sh = '#!/usr/bin/env bash\necho 0.25 > "$LOGS_DIR/reward.txt"\n'
    grade = run_grader(load_task(make_task(tmp_path, sh)), candidate, sandbox="bwrap")
    assert grade.reward == 0.25 and grade.reward_file == "reward.txt"


@requires_bwrap
@pytest.mark.parametrize(
    "script, error",
    [
        ('echo "crashed" >&2; exit 3', "wrote no reward"),
        ('echo "{not json" > "$LOGS_DIR/reward.json"', "malformed reward.json"),
        ('echo \'{"reward": 1.5}\' > "$LOGS_DIR/reward.json"', "outside [0, 1]"),
        ('echo nan > "$LOGS_DIR/reward.txt"', "outside [0, 1]"),
        (
            'echo \'{"reward": 0.0, "error": "grader failed"}\' > "$LOGS_DIR/reward.json"',
            "grader reported: grader failed",
        ),
    ],
)
def test_a_grader_without_a_valid_reward_scores_zero_with_a_reason(
    tmp_path, candidate, script, error
):
    grade = run_grader(
        load_task(make_task(tmp_path, "#!/usr/bin/env bash\n" + script + "\n")),
        candidate,
        sandbox="bwrap",
    )
    assert grade.reward == 0.0
    assert error in grade.error


@requires_bwrap
def test_files_outside_the_logs_dir_are_never_read(tmp_path, candidate):
    # a grader that leaves its reward elsewhere (e.g. in the candidate) gets nothing
    sh = (
        "#!/usr/bin/env bash\necho 1.0 > /tmp/reward.txt\n"
        'echo 1.0 > "$TESTS_DIR/reward.txt" 2>/dev/null\nexit 0\n'
    )
    grade = run_grader(load_task(make_task(tmp_path, sh)), candidate, sandbox="bwrap")
    assert grade.reward == 0.0 and grade.error is not None


def test_missing_candidate_and_candidate_inside_hidden_files_are_refused(tmp_path):
    task = load_task(make_task(tmp_path, PROBING_TEST_SH))
    with pytest.raises(GraderError, match="not found"):
        run_grader(task, tmp_path / "nope", sandbox="none")
    with pytest.raises(GraderError, match="hidden"):
        run_grader(task, task.root / "solution" / "app", sandbox="none")


def test_oracle_copy_is_outside_the_task_and_removed_after(tmp_path):
    task = load_task(make_task(tmp_path, PROBING_TEST_SH))
    with oracle_copy(task) as app:
        assert (app / "answer.txt").read_text() == "oracle"
        assert task.root not in app.parents
    assert not app.exists()
    shutil.rmtree(task.root / "solution")
    with pytest.raises(GraderError, match="no oracle"), oracle_copy(load_task(task.root)):
        pass


def test_unisolated_grading_passes_host_paths(tmp_path, candidate):
    task = load_task(make_task(tmp_path, PROBING_TEST_SH))
    grade = run_grader(task, candidate, sandbox="none")
    assert (
        grade.reward == 0.75
        and grade.components["app"] == 1
        and grade.components["empty_logs"] == 1
    )


# ---- the command line -----------------------------------------------------------------------
def _twin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "/nonexistent/task", "--oracle"], "task directory not found"),
        (["--task", "{malformed}", "--oracle"], "malformed task.toml"),
        (["--task", "{task}", "--candidate", "/nonexistent/cand"], "candidate directory not found"),
        (["--task", "{task}"], "exactly one of"),
        (["--task", "{task}", "--oracle", "--candidate", "{task}"], "exactly one of"),
        (["--task", "{nooracle}", "--oracle"], "no oracle"),
    ],
)
def test_twin_grade_refuses_bad_input_with_one_line_and_exit_2(tmp_path, args, message):
    task = make_task(tmp_path, PROBING_TEST_SH)
    malformed = make_task(tmp_path, PROBING_TEST_SH, name="malformed")
    (malformed / "task.toml").write_text("version = [unclosed\n")
    nooracle = make_task(tmp_path, PROBING_TEST_SH, name="nooracle")
    shutil.rmtree(nooracle / "solution")
    filled = [a.format(task=task, malformed=malformed, nooracle=nooracle) for a in args]
    proc = _twin("grade", *filled)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@requires_bwrap
def test_twin_grade_prints_reward_and_writes_json(tmp_path, capsys):
    task = make_task(tmp_path, PROBING_TEST_SH)
    out = tmp_path / "grade.json"
    assert (
        main(["grade", "--task", str(task), "--oracle", "--sandbox", "bwrap", "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "reward 0.7500" in printed and "c1" in printed
    data = json.loads(out.read_text())
    assert (
        data["reward"] == 0.75 and data["components"]["app"] == 1
    )  # the oracle copy sits at APP_DIR


# ---- outcome semantics: the candidate's failure is 0, twin's own failure is infrastructure ------
@requires_bwrap
@pytest.mark.parametrize(
    "script, reason",
    [
        ("exit 3", "wrote no reward"),
        ("kill -SEGV $$", "wrote no reward"),
        ('ln -s /tests/test.sh "$LOGS_DIR/reward.json"', "malformed reward.json: not a regular file"),
        ('mkfifo "$LOGS_DIR/reward.txt"', "malformed reward.txt"),
        ('python3 -c "print(\'[\' * 100000)" > "$LOGS_DIR/reward.json"', "malformed reward.json"),
    ],
)
def test_a_grader_failing_on_the_candidate_is_reward_zero_with_the_reason(tmp_path, candidate, script, reason):
    grade = run_grader(load_task(make_task(tmp_path, "#!/usr/bin/env bash\n" + script + "\n")), candidate, sandbox="bwrap")
    assert grade.reward == 0.0 and reason in grade.error


@requires_bwrap
def test_a_grader_reporting_its_own_machinery_failing_is_infrastructure(tmp_path, candidate):
    from benchmark_adapter.grading.grader import GraderInfraError

    script = 'echo \'{"reward": 0, "infrastructure_error": "nested sandbox unavailable"}\' > "$LOGS_DIR/reward.json"'
    with pytest.raises(GraderInfraError, match="nested sandbox unavailable"):
        run_grader(load_task(make_task(tmp_path, "#!/usr/bin/env bash\n" + script + "\n")), candidate, sandbox="bwrap")


def test_a_sandbox_that_never_reaches_test_sh_is_infrastructure(tmp_path, candidate, monkeypatch):
    from benchmark_adapter.grading.grader import GraderInfraError
    from ground.sandbox import ExecResult
    from ground.sandboxes.none import UnsandboxedProcess

    def broken_exec(self, command, **kwargs):
        return ExecResult(returncode=1, stdout="", stderr="bwrap: setting up uid map: Permission denied\n")

    monkeypatch.setattr(UnsandboxedProcess, "exec", broken_exec)
    task = load_task(make_task(tmp_path, "#!/usr/bin/env bash\necho 1 > \"$LOGS_DIR/reward.txt\"\n"))
    with pytest.raises(GraderInfraError, match="did not start test.sh"):
        run_grader(task, candidate, sandbox="none")


# ---- a zero while the host is out of disk is the machine's, not the candidate's -----------------
ZERO_WITH_OUTPUT = (
    "#!/usr/bin/env bash\necho 'OSError: [Errno 28] No space left on device' >&2\n"
    'echo \'{"reward": 0.0, "error": "grader failed"}\' > "$LOGS_DIR/reward.json"\n'
)


def test_a_zero_while_the_host_is_out_of_disk_is_infrastructure_with_the_graders_output(
    tmp_path, candidate, monkeypatch
):
    from benchmark_adapter.grading import grader
    from benchmark_adapter.grading.grader import GraderInfraError

    monkeypatch.setattr(grader, "host_shortage", lambda paths: "/var/tmp has 0 MiB free for unprivileged writers")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "grade.json").write_text("{}")  # an earlier grade: not this one
    with pytest.raises(GraderInfraError, match="out of disk .*0 MiB free") as caught:
        run_grader(load_task(make_task(tmp_path, ZERO_WITH_OUTPUT)), candidate, sandbox="none", out_dir=kept)
    assert "No space left on device" in caught.value.log_tail
    assert "No space left on device" in (kept / "grader-output.txt").read_text()
    assert not (kept / "grade.json").exists()


def test_a_reward_above_zero_stands_whatever_the_host_disk(tmp_path, candidate, monkeypatch):
    from benchmark_adapter.grading import grader

    asked = []
    monkeypatch.setattr(grader, "host_shortage", lambda paths: asked.append(paths) or "/tmp has 0 MiB free")
    task = load_task(make_task(tmp_path, "#!/usr/bin/env bash\necho 0.5 > \"$LOGS_DIR/reward.txt\"\n"))
    assert run_grader(task, candidate, sandbox="none").reward == 0.5
    assert asked == []


def test_a_zero_with_room_on_the_host_is_the_candidates_score(tmp_path, candidate):
    grade = run_grader(load_task(make_task(tmp_path, ZERO_WITH_OUTPUT)), candidate, sandbox="none")
    assert grade.reward == 0.0 and grade.error == "grader reported: grader failed"
    assert "No space left on device" in grade.log_tail
