"""The sweep runner's bookkeeping with a fast fake grader (the real sweep: test_mlp_train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import Defect, DefectError
from benchmark_adapter.grading.grader import Grade, GraderError
from benchmark_adapter.grading.sweep import check_scores, load_defects, run_sweep
from task_model.loader import load_task


def make_task(root: Path) -> Path:
    task = root / "fake"
    (task / "environment" / "source").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (task / "solution" / "app").mkdir(parents=True)
    (task / "solution" / "app" / "model.py").write_text("SCALE = 1.0\nACT = 'gelu'\nUNUSED = 0\n")
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "instruction.md").write_text("x\n")
    return task


def fake_grade(task, candidate: Path) -> Grade:
    """Scores two checks from the candidate's text: scale and activation."""
    text = (candidate / "model.py").read_text()
    checks = {
        "scale": {"score": 1.0 if "SCALE = 1.0" in text else 0.3},
        "act": {"score": 1.0 if "ACT = 'gelu'" in text else 0.0},
        "never": {"score": 0.9},
    }
    reward = sum(c["score"] for c in checks.values()) / 3
    return Grade(
        task=task.name,
        candidate=str(candidate),
        reward=reward,
        checks=checks,
        returncode=0,
        duration_s=0.0,
        sandbox="fake",
    )


DEFECTS = [
    Defect(name="scale", file="model.py", old="SCALE = 1.0", new="SCALE = 2.0", component="model"),
    Defect(name="act", file="model.py", old="ACT = 'gelu'", new="ACT = 'relu'", component="model"),
    Defect(name="harmless", file="model.py", old="UNUSED = 0", new="UNUSED = 1", component="model"),
]


def test_sweep_reports_caught_defects_and_tripped_checks(tmp_path):
    task = load_task(make_task(tmp_path))
    report = run_sweep(task, DEFECTS, grade_fn=fake_grade, jobs=2)
    assert report.oracle_reward == pytest.approx(2.9 / 3)
    by_name = {d.name: d for d in report.defects}
    assert by_name["scale"].caught and by_name["scale"].tripped == ["scale"]
    assert by_name["act"].caught and by_name["act"].tripped == ["act"]
    assert not by_name["harmless"].caught and by_name["harmless"].tripped == []
    assert report.caught_fraction == pytest.approx(2 / 3)
    assert report.untripped_checks == ["never"]
    assert report.tripped_fraction == pytest.approx(2 / 3)
    # the oracle in the task is never modified
    assert (task.root / "solution" / "app" / "model.py").read_text().startswith("SCALE = 1.0")


def test_a_stale_defect_fails_before_any_grading(tmp_path):
    task = load_task(make_task(tmp_path))
    calls = []
    stale = Defect(name="stale", file="model.py", old="NOT THERE", new="x", component="model")
    with pytest.raises(DefectError, match="stale"):
        run_sweep(task, [stale], grade_fn=lambda t, c: calls.append(c) or fake_grade(t, c))
    assert len(calls) == 1  # only the oracle


def test_missing_checks_in_a_defect_grade_count_as_tripped(tmp_path):
    task = load_task(make_task(tmp_path))

    def crashing(task, candidate):
        grade = fake_grade(task, candidate)
        if "2.0" in (candidate / "model.py").read_text():
            return Grade(
                task=task.name,
                candidate=str(candidate),
                reward=0.0,
                returncode=1,
                duration_s=0.0,
                sandbox="fake",
                error="the grader wrote no reward.json or reward.txt",
            )
        return grade

    report = run_sweep(task, DEFECTS[:1], grade_fn=crashing)
    assert sorted(report.defects[0].tripped) == ["act", "never", "scale"]
    assert report.defects[0].error is not None


def test_load_defects_validates_the_module(tmp_path):
    with pytest.raises(GraderError, match="not found"):
        load_defects(tmp_path / "none.py")
    bad = tmp_path / "bad.py"
    bad.write_text("DEFECTS = ['not a defect']\n")
    with pytest.raises(GraderError, match="DEFECTS"):
        load_defects(bad)


def test_check_scores_skips_non_numeric_entries():
    grade = Grade(
        task="t",
        candidate="c",
        reward=0.5,
        returncode=0,
        duration_s=0.0,
        sandbox="x",
        checks={"a": {"score": 0.5}, "b": {"score": None}, "c": 0.25, "d": "text"},
    )
    assert check_scores(grade) == {"a": 0.5, "c": 0.25}
