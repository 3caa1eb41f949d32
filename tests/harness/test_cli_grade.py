"""`twin grade`'s report: whole lines when piped, scores in the format `twin probe` uses."""

from __future__ import annotations

import io

from rich.console import Console

from benchmark_adapter.grader import Grade
from harness.cli.grade import _print_grade

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
