"""`twin grade`: a zero in the grader's own words; piped, whole lines with scores as `twin probe` prints them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from benchmark_adapter.grading.grader import Grade
from harness.cli import grade as grade_cli
from harness.cli.app import main
from harness.cli.grade import _print_grade

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
    from benchmark_adapter.grading.grader import _keep

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "reward.json").write_text(json.dumps({"reward": 0.0}))
    grade = Grade(task="t", candidate="c", reward=0.0, returncode=1, duration_s=0.0, sandbox="none",
                  log_tail="Traceback: boom\n")  # fmt: skip
    _keep(grade, logs, tmp_path / "kept")
    assert (tmp_path / "kept" / "grader-output.txt").read_text() == "Traceback: boom\n"

DETAIL = "; ".join(f"out{i}: scalar score 0.949078 (distance 5.09e-02 > tolerance 1.2e-06)" for i in range(5))


def _grade() -> Grade:
    return Grade(
        task="t", candidate="/c", reward=0.5, components={"spec": 0.75}, reward_file="reward.json",
        checks={"L1.[bold]forward": {"score": 0.949078, "detail": DETAIL}}, returncode=0, duration_s=1.0,
        sandbox="bwrap",
    )  # fmt: skip


def test_piped_grade_keeps_every_detail_whole_and_its_text_literal():
    out = io.StringIO()
    _print_grade(Console(file=out, width=80), _grade())
    lines = out.getvalue().splitlines()
    assert lines[0] == "t: reward 0.5000"
    assert "   0.949  L1.[bold]forward: " + DETAIL in lines  # not cut at any width, never markup
    assert "    0.75  spec" in lines


def test_terminal_grade_is_a_table_with_the_same_numbers():
    out = io.StringIO()
    _print_grade(Console(file=out, width=200, force_terminal=True, color_system=None), _grade())
    text = out.getvalue()
    assert "0.949" in text and "0.9491" not in text and "[bold]forward" in text


def test_an_infrastructure_failure_prints_the_graders_output_and_is_no_score(tmp_path, monkeypatch, capsys):
    from benchmark_adapter.grading.grader import GraderInfraError

    def failing(task, candidate, *, sandbox, out_dir, audit_log):
        raise GraderInfraError("the grader gave no reward while the host was out of disk", "OSError: [red]x\n")

    monkeypatch.setattr(grade_cli, "run_grader", failing)
    (tmp_path / "cand").mkdir()
    code = main(["grade", "--task", str(TINY), "--candidate", str(tmp_path / "cand"), "--sandbox", "none"])
    captured = capsys.readouterr()
    assert code != 0
    assert "OSError: [red]x" in captured.out  # verbatim
    assert "out of disk" in captured.err and "not the candidate's score" in captured.err
    assert "reward" not in captured.out.replace("no reward", "")
