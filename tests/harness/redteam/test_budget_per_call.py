"""One reply carrying many tool calls: the budget holds per tool call, and a reply holds at most a cap.

A model may put any number of calls into one reply. Were the budget looked at only between model
calls, 40 `sleep` calls in one reply would run for 40 sleeps against any wall budget.
"""

from __future__ import annotations

import pytest

from ground.errors import BudgetExceeded
from ground.model import ModelReply, ToolCall
from harness.models import budget as budget_module
from harness.models.budget import Budget, BudgetTracker
from roles.agent import Agent
from roles.prompting import render
from roles.tools import MAX_TOOL_CALLS_PER_REPLY, Tool, ToolResult


class OneReply:
    """A model whose only reply carries `count` calls of `sleep`."""

    name = "one-reply"

    def __init__(self, count: int) -> None:
        self.count = count

    def query(self, messages, tools=None, *, role="agent") -> ModelReply:
        calls = [ToolCall(id=f"c{i}", name="sleep", arguments={"seconds": 2}) for i in range(self.count)]
        return ModelReply(tool_calls=calls)


class Clock:
    """The budget's clock; `sleep` advances it (no real time passes)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(budget_module.time, "monotonic", fake.monotonic)
    return fake


def sleep_tool(clock: Clock, ran: list[int]) -> Tool:
    def sleep(seconds: int) -> ToolResult:
        ran.append(seconds)
        clock.now += seconds
        return ToolResult(text="slept")

    return Tool("sleep", "Sleep.", {"seconds": {"type": "integer"}}, sleep)


def test_the_wall_budget_stops_a_reply_between_two_of_its_tool_calls(clock):
    ran: list[int] = []
    tracker = BudgetTracker(Budget(max_wall_s=15))
    agent = Agent(OneReply(40), {"sleep": sleep_tool(clock, ran)}, role="migrator", budget_check=tracker.check_tool)
    agent.messages = [{"role": "user", "content": "go"}]
    with pytest.raises(BudgetExceeded) as info:
        agent.step()
    assert info.value.kind == "wall_time"
    assert len(ran) == 8  # 0, 2, ..., 14 s were under 15 s; at 16 s the ninth call never started
    assert clock.now - 1000.0 == 16


def test_a_reply_runs_at_most_the_cap_of_tool_calls_and_every_call_is_answered(clock):
    ran: list[int] = []
    agent = Agent(OneReply(40), {"sleep": sleep_tool(clock, ran)}, role="migrator")
    agent.messages = [{"role": "user", "content": "go"}]
    agent.step()
    answers = [m for m in agent.messages if m["role"] == "tool"]
    assert len(ran) == MAX_TOOL_CALLS_PER_REPLY
    assert [m["tool_call_id"] for m in answers] == [f"c{i}" for i in range(40)]
    refused = answers[MAX_TOOL_CALLS_PER_REPLY:]
    assert all(m["content"].startswith("error: not run: one reply may carry at most") for m in refused)


def test_a_reply_paid_within_the_budget_runs_its_calls_and_one_past_it_runs_none(clock):
    from ground.model import Usage

    tracker = BudgetTracker(Budget(max_calls=1, max_usd=1.0))
    tracker.charge(Usage(prompt_tokens=1, completion_tokens=1), 1.0)  # at both limits, not past them
    tracker.check_tool()
    tracker.charge(Usage(prompt_tokens=1, completion_tokens=1), 0.5)
    with pytest.raises(BudgetExceeded):
        tracker.check_tool()


def test_the_model_is_told_the_cap_where_it_reads_its_tools():
    from types import SimpleNamespace

    from roles.tools import workbench_tools

    assert f"at most {MAX_TOOL_CALLS_PER_REPLY} tool calls" in render("migrator_system")
    bench = SimpleNamespace(boundary=None, candidate=None, reference=None, scratch=None, repo=None,
                            command_timeout_s=10.0, time_left=None)  # fmt: skip
    tools = workbench_tools(bench, write=False)
    for name in ("bash", "bash_reference"):
        assert f"At most {MAX_TOOL_CALLS_PER_REPLY} tool calls per reply" in tools[name].description


def test_a_whole_run_given_one_reply_of_forty_sleeps_stops_on_its_wall_budget(tmp_path):
    """The base scaffold, a scripted reply of 40 `sleep 0.3` calls, a 1 s wall budget: the run stops
    on the budget having run at most the cap of them (all 40 ran before: 12 s against 1 s)."""
    from harness.run.directory import RunConfig
    from harness.run.migration import run_migration
    from harness.run.session import RunInputs
    from harness.scaffolds.registry import SCAFFOLDS
    from task_model.loader import load_task
    from tests.harness import loop_scripts as plans

    sleeps = {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 0.3"}} for _ in range(40)],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1}}  # reported: no tokenizer to load
    script = plans.write_script(tmp_path / "script.json", [sleeps, sleeps])
    config = RunConfig.build(task=plans.TINY_TASK, model=script, scaffold="base", sandbox="none", grade=False,
                             rounds=1, budget={"max_wall_s": 1.0})  # fmt: skip
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    state = inputs.run.load_state()
    lines = inputs.run.trajectory.read_text().splitlines()
    ran = [line for line in lines if '"sleep 0.3"' in line and '"tool_call"' in line]
    assert state.stop_reason.startswith("budget: wall_time"), state.stop_reason
    assert len(ran) <= MAX_TOOL_CALLS_PER_REPLY, len(ran)


@pytest.mark.slow  # five seconds of wall budget spent on purpose
def test_a_sixty_second_command_under_a_five_second_wall_budget_ends_near_five_seconds(tmp_path):
    """`--max-wall-s 5` and one `sleep 60`: the command is stopped where the budget ends, the output
    says which limit it hit, and the run's wall time reads about 5 s (it read 60 s before)."""
    import json

    from harness.run.directory import RunConfig
    from harness.run.migration import run_migration
    from harness.run.session import RunInputs
    from harness.scaffolds.registry import SCAFFOLDS
    from task_model.loader import load_task
    from tests.harness import loop_scripts as plans

    sleep = {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 60"}}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1}}  # fmt: skip
    script = plans.write_script(tmp_path / "script.json", [sleep, sleep])
    config = RunConfig.build(task=plans.TINY_TASK, model=script, scaffold="base", sandbox="none", grade=False,
                             rounds=1, budget={"max_wall_s": 5.0})  # fmt: skip
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    state = inputs.run.load_state()
    records = [json.loads(line) for line in inputs.run.trajectory.read_text().splitlines()]
    (ran,) = [r for r in records if r.get("type") == "tool_call" and r["arguments"].get("command") == "sleep 60"]
    assert state.stop_reason.startswith("budget: wall_time"), state.stop_reason
    assert ran["duration_s"] < 15, ran["duration_s"]
    assert "what was left of the run's wall budget" in ran["result"]
    assert state.spent.wall_s < 15, state.spent.wall_s
