"""`twin grade`: run a task's unchanged grader on a candidate."""

from __future__ import annotations

from harness.errors import NotImplementedYet


def grade_command() -> None:
    """Grade a candidate (or the task's oracle solution) with the task's own grader."""
    raise NotImplementedYet("twin grade is not implemented yet")
