"""A run's grades: why a reward is 0 or missing, in the run directory and on the console; regrading on resume."""

from __future__ import annotations

import json

import pytest

from benchmark_adapter.grading.grader import Grade, GraderInfraError
from harness.run import finish
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.finish import closing_lines
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(
    __import__("shutil").which("bwrap") is None, reason="the loop's tests run the real bwrap sandbox"
)

REAL_GRADER = finish.run_grader
FULL_DISK_TAIL = "Traceback (most recent call last):\nOSError: [Errno 28] No space left on device ```x```\n"


def start(tmp_path) -> RunDir:
    model = plans.write_script(tmp_path / "script.json", plans.base_two_rounds())
    config = RunConfig.build(task=plans.TINY_TASK, model=model, rounds=2, scaffold="base", base_steps=4)
    return RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))


def counting(calls: list, grader):
    def run_grader(task, candidate, **kwargs):
        calls.append(candidate)
        return grader(task, candidate, **kwargs)

    return run_grader


def full_disk(task, candidate, **kwargs):
    raise GraderInfraError("the grader gave no reward while the host was out of disk (/var/tmp has 0 MiB free)",
                           FULL_DISK_TAIL)  # fmt: skip


def scored_zero(task, candidate, **kwargs):
    return Grade(task=task.name, candidate=str(candidate), reward=0.0, returncode=1, duration_s=0.2, sandbox="bwrap",
                 error="grader reported: grader failed", log_tail="ImportError: no module jax\n")  # fmt: skip


def test_a_round_twin_failed_to_grade_says_why_keeps_the_output_and_is_graded_again_on_resume(tmp_path, monkeypatch):
    run = start(tmp_path)
    monkeypatch.setattr(finish, "run_grader", full_disk)
    line = run_migration(RunInputs.read(run), SCAFFOLDS)
    grades = json.loads(run.grades.read_text())
    assert [g["reward"] for g in grades["rounds"]] == [None, None]
    assert grades["rounds"][0]["output"] == "grading/round-1.txt"
    assert (run.root / "grading" / "round-1.txt").read_text() == FULL_DISK_TAIL
    assert "infrastructure, not the candidate's score: the grader gave no reward while the host was out" in line
    summary = run.summary.read_text()
    assert "## Why a reward is 0 or missing" in summary
    assert "- round 2: infrastructure, not the candidate's score: the grader gave no reward" in summary
    assert "````text\n" in summary and "No space left on device ```x```\n````" in summary  # fenced, not closable
    lines = closing_lines(run, run.load_config(), run.load_state())
    assert any(x.startswith("  round 1: not graded — infrastructure") and "grading/round-1.txt" in x for x in lines)
    assert f"grade the rounds left ungraded again with: twin migrate --resume {run.root}" in lines
    assert "| 1 |" in summary and summary.count("| not graded |") == 2
    assert any(x.startswith("run directory: ") and "grades.json, grading/" in x for x in lines)

    calls: list = []
    monkeypatch.setattr(finish, "run_grader", counting(calls, REAL_GRADER))  # the disk has room again
    run_migration(RunInputs.read(run), SCAFFOLDS)
    grades = json.loads(run.grades.read_text())
    assert [g["reward"] for g in grades["rounds"]] == [0.5, 1.0] and len(calls) == 2
    assert "Why a reward is 0 or missing" not in run.summary.read_text()

    calls.clear()
    run_migration(RunInputs.read(run), SCAFFOLDS)  # graded rounds keep their grade
    assert calls == [] and [g["reward"] for g in json.loads(run.grades.read_text())["rounds"]] == [0.5, 1.0]


def test_a_zero_says_why_in_the_summary_and_on_the_console_and_is_not_graded_again(tmp_path, monkeypatch):
    run = start(tmp_path)
    calls: list = []
    monkeypatch.setattr(finish, "run_grader", counting(calls, scored_zero))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    assert len(calls) == 2
    summary = run.summary.read_text()
    assert "- round 1: grader reported: grader failed (grader output: `grading/round-1.txt`)" in summary
    assert "ImportError: no module jax" in summary
    lines = closing_lines(run, run.load_config(), run.load_state())
    assert any(x.startswith("  round 2: 0.0000 — grader reported: grader failed (grader output: ") for x in lines)
    assert not any("--resume" in x for x in lines)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    assert len(calls) == 2
