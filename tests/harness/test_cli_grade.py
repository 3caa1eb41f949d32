"""`twin grade` explains a zero: the grader's own last lines, its error, and the output folder one level down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_adapter.grader import Grade
from harness.cli import grade as grade_cli
from harness.cli.app import main

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "tasks" / "published" / "tiny-net"
TINY = REPO / "tests" / "fixtures" / "tasks" / "tiny-calc"


def _fake(reward: float, error: str | None, tail: str):
    def run_grader(task, candidate, *, sandbox, out_dir, audit_log):
        return Grade(task=task.name, candidate=str(candidate), reward=reward, returncode=0, duration_s=0.1,
                     sandbox=sandbox, error=error, log_tail=tail)  # fmt: skip

    return run_grader


@pytest.mark.parametrize(("reward", "error"), [(0.0, None), (0.0, "grader reported: refs unreadable")])
def test_a_zero_prints_the_graders_last_lines_and_error(tmp_path, monkeypatch, capsys, reward, error):
    tail = "line one\nPermissionError: [Errno 13] /tests/refs.npz [bold]x[/]\n"
    monkeypatch.setattr(grade_cli, "run_grader", _fake(reward, error, tail))
    (tmp_path / "cand").mkdir()
    main(["grade", "--task", str(TINY), "--candidate", str(tmp_path / "cand"), "--sandbox", "none"])
    out = capsys.readouterr().out
    assert "PermissionError: [Errno 13] /tests/refs.npz [bold]x[/]" in out  # verbatim, never markup
    assert ("grader error: grader reported: refs unreadable" in out) is (error is not None)


def test_a_good_grade_prints_no_explanation(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grade_cli, "run_grader", _fake(0.9, None, "all fine\n"))
    (tmp_path / "cand").mkdir()
    assert main(["grade", "--task", str(TINY), "--candidate", str(tmp_path / "cand"), "--sandbox", "none"]) == 0
    assert "last output lines" not in capsys.readouterr().out


@pytest.mark.parametrize("nested", [True, False])
def test_a_published_task_says_which_candidate_path_was_meant(tmp_path, monkeypatch, capsys, nested):
    monkeypatch.setattr(grade_cli, "run_grader", _fake(0.0, None, ""))
    cand = tmp_path / "out"
    (cand / "jax_repo" if nested else cand).mkdir(parents=True)
    main(["grade", "--task", str(PUBLISHED), "--candidate", str(cand), "--sandbox", "none"])
    out = " ".join(capsys.readouterr().out.split())
    assert ("did you mean --candidate" in out and str(cand / "jax_repo") in out) is nested


def test_keep_logs_holds_the_graders_output(tmp_path):
    from benchmark_adapter.grader import _keep

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "reward.json").write_text(json.dumps({"reward": 0.0}))
    grade = Grade(task="t", candidate="c", reward=0.0, returncode=1, duration_s=0.0, sandbox="none",
                  log_tail="Traceback: boom\n")  # fmt: skip
    _keep(grade, logs, tmp_path / "kept")
    assert (tmp_path / "kept" / "grader-output.txt").read_text() == "Traceback: boom\n"
