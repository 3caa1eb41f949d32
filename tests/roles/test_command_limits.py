"""A command's limit is the smaller of its own and what is left of the run's wall budget, and says so.

Every command tool states its time limit in its description; a command stopped by a limit says
which limit (its own, or the run's wall budget) and how much CPU its processes had in that time.
"""

from __future__ import annotations

import time

import pytest

from ground.boundary import Boundary, Mount
from ground.sandbox import ExecResult
from ground.sandboxes.registry import make_sandbox
from roles.tools import bash_tool, command_limit, format_exec, limit_sentence


@pytest.fixture
def sandbox(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    boundary = Boundary(name="t:candidate", mounts=[Mount(host=app, inside="/app", writable=True)], workdir="/app")
    box = make_sandbox("none", boundary)
    yield box
    box.close()


def test_a_command_under_a_nearly_spent_wall_budget_ends_near_what_was_left(sandbox):
    tool = bash_tool(sandbox, name="bash", description="Run.", timeout_s=600.0, time_left=lambda: 1.0)
    started = time.monotonic()
    result = tool(command="sleep 60")
    took = time.monotonic() - started
    assert took < 10, took  # 60 s had the budget not limited it
    assert not result.ok
    assert "exit code 124 (timed out: stopped at its time limit of 1.0 s, what was left of the run's wall budget" in (
        result.text
    )
    assert "s of CPU time in" in result.text


def test_a_command_stopped_at_its_own_limit_says_so(sandbox):
    tool = bash_tool(sandbox, name="bash", description="Run.", timeout_s=0.5, time_left=lambda: 500.0)
    result = tool(command="sleep 60")
    assert "stopped at its time limit of 0.5 s, the command limit" in result.text


@pytest.mark.parametrize(
    ("own", "left", "limit", "which"),
    [
        (600.0, None, 600.0, "the command limit"),
        (600.0, 5.0, 5.0, "wall budget"),
        (10.0, 50.0, 10.0, "the command limit"),
        (600.0, -3.0, 0.0, "wall budget"),
    ],
)
def test_the_limit_is_the_smaller_of_the_own_and_the_budget_left(own, left, limit, which):
    got, note = command_limit(own, lambda: left)
    assert got == limit
    assert which in note


def test_every_command_tool_states_its_limit_in_its_description():
    assert "stopped after 600 s (exit code 124" in limit_sentence(600.0, None)
    budgeted = limit_sentence(120.0, lambda: 30.0)
    assert "after 120 s or when the run's wall budget runs out" in budgeted
    assert "30" not in budgeted  # the description is fixed text, sent with every call


def test_a_timeout_under_load_shows_cpu_against_wall_time():
    loaded = ExecResult(returncode=124, timed_out=True, duration_s=30.0, limit_s=30.0, cpu_s=9.0)
    text = format_exec(loaded, ", the command limit")
    assert "stopped at its time limit of 30.0 s, the command limit" in text
    assert "9.0 s of CPU time in 30.0 s of wall time: the machine is loaded" in text
    idle = ExecResult(returncode=124, timed_out=True, duration_s=30.0, limit_s=30.0, cpu_s=29.0)
    assert "loaded" not in format_exec(idle)
