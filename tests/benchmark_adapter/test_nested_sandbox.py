"""A bundled grader whose nested sandbox cannot start reports an infrastructure failure, never a score.

Every bundled grader (and the one `twin task new` makes) starts the candidate's
nested sandbox once, over an empty directory, before any candidate code runs. Where
bubblewrap cannot be had (simulated by a PATH without it), `reward.json` says
`infrastructure_error` and `run_grader` raises `GraderInfraError`: retried, never
scored. The candidate never runs then, in no weaker sandbox either.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import benchmark_adapter.grading.grader as grader_module
from benchmark_adapter.grading.grader import GraderInfraError, oracle_copy, run_grader
from task_model.loader import load_task
from tests.conftest import TASKS_DIR

GRADERS = [
    TASKS_DIR / "t2j-mini" / "mlp-train",
    TASKS_DIR / "t2j-mini" / "llama-lora-sft",
    TASKS_DIR / "t2j-mini" / "llama-paged-serve",
    TASKS_DIR / "flask-to-starlette",
    TASKS_DIR / "published" / "tiny-net",  # the grader `twin task new` makes
]


@pytest.fixture()
def no_bwrap(tmp_path) -> Path:
    """A PATH with what test.sh needs and no bubblewrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "mkdir", "cat", "env"):
        for prefix in ("/usr/bin", "/bin"):
            if Path(prefix, tool).exists():
                (bin_dir / tool).symlink_to(Path(prefix, tool))
                break
    return bin_dir


@pytest.mark.parametrize("task_dir", GRADERS, ids=lambda p: p.name)
def test_a_grader_without_its_nested_sandbox_reports_infrastructure(task_dir, no_bwrap, tmp_path, monkeypatch):
    grader_env = grader_module._grader_env

    def without_bwrap(*args, **kwargs):
        env, script = grader_env(*args, **kwargs)
        return {**env, "PATH": str(no_bwrap), "PYTHON": sys.executable}, script

    monkeypatch.setattr(grader_module, "_grader_env", without_bwrap)
    task = load_task(task_dir)
    with oracle_copy(task) as oracle, pytest.raises(GraderInfraError, match="sandbox"):
        run_grader(task, oracle, sandbox="none")


def test_the_report_comes_before_any_candidate_code(tmp_path, no_bwrap):
    """A candidate that would leave a trace at import never runs: the grader stopped first."""
    task = TASKS_DIR / "t2j-mini" / "mlp-train"
    app = tmp_path / "app"
    app.mkdir()
    trace = tmp_path / "ran.txt"
    (app / "model.py").write_text(f"open({str(trace)!r}, 'w').write('ran')\n")
    logs = tmp_path / "logs"
    env = {
        "PATH": str(no_bwrap),
        "PYTHON": sys.executable,
        "TESTS_DIR": str(task / "tests"),
        "APP_DIR": str(app),
        "ASSETS_DIR": str(task / "environment" / "assets"),
        "LOGS_DIR": str(logs),
    }
    proc = subprocess.run(
        ["bash", str(task / "tests" / "test.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reward = json.loads((logs / "reward.json").read_text())
    assert "nested sandbox" in reward["infrastructure_error"] and reward["reward"] == 0.0
    assert not trace.exists()
    with pytest.raises(GraderInfraError):
        grader_module._read_reward(logs)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_the_library_reports_a_sandbox_that_does_not_start(tmp_path, monkeypatch):
    """bwrap is there but the sandbox it builds fails: reported, and run_candidate refuses too."""
    sys.path.insert(0, str(TASKS_DIR.parent / "benchmark_adapter" / "grading" / "templates" / "grader"))
    try:
        import grading
        import grading_sandbox
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(grading_sandbox, "_BWRAP_VARIANT", [["--not-a-flag-this-bwrap-knows"]])
    assert grading.nested_sandbox_ready(tmp_path / "logs") is False
    reward = json.loads((tmp_path / "logs" / "reward.json").read_text())
    assert "did not start (exit 1)" in reward["infrastructure_error"], reward
    with pytest.raises(grading.IsolationUnavailable):
        grading.run_candidate("record('x', 1)", app_dir=tmp_path, timeout_s=5)
