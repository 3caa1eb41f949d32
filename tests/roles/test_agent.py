from __future__ import annotations

import pytest

from harness.ground.errors import BudgetExceeded
from harness.models.budget import Budget, BudgetTracker
from harness.models.factory import MeteredModel
from harness.models.scripted import ScriptedModel
from roles.agent import Agent, Submitted
from roles.tools import Tool, ToolError, ToolResult, submit_tool


def echo_tool() -> Tool:
    def echo(text: str) -> ToolResult:
        if text == "fail":
            raise ToolError("echo refused 'fail'")
        return ToolResult(text=f"echo: {text}")

    return Tool("echo", "Echo text back.", {"text": {"type": "string"}}, echo)


def done_tool() -> Tool:
    def accept(summary: str) -> None:
        raise Submitted(summary)

    return submit_tool("Finish.", {"summary": {"type": "string"}}, accept)


def call(name, **arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_runs_tools_until_submit_and_feeds_results_back():
    model = ScriptedModel([call("echo", text="hi"), call("submit", summary="all done")])
    agent = Agent(model, {"echo": echo_tool(), "submit": done_tool()}, role="tester")
    outcome = agent.run("system text", "task text")
    assert outcome.exit == "submitted"
    assert outcome.output == "all done"
    assert outcome.steps == 2
    tool_messages = [m for m in outcome.messages if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "echo: hi"
    # the second request carried the first tool result
    assert model.requests[1][1][-1]["content"] == "echo: hi"


def test_failures_are_data_for_the_model_not_crashes():
    model = ScriptedModel(
        [
            call("echo", text="fail"),
            call("no_such_tool"),
            call("echo", wrong_argument=1),
            {"tool_calls": [{"name": "echo", "arguments": "{not json"}]},
            call("submit", summary="ok"),
        ]
    )
    agent = Agent(model, {"echo": echo_tool(), "submit": done_tool()}, role="tester")
    outcome = agent.run("s", "t")
    texts = [m["content"] for m in outcome.messages if m["role"] == "tool"]
    assert texts[0] == "error: echo refused 'fail'"
    assert texts[1].startswith("error: no tool named 'no_such_tool'")
    assert texts[2].startswith("error: bad arguments for echo")
    assert texts[3].startswith("error: the arguments of echo were not a JSON object")
    assert outcome.exit == "submitted"


def test_step_limit_ends_the_run_without_output():
    model = ScriptedModel([call("echo", text=str(i)) for i in range(5)])
    agent = Agent(model, {"echo": echo_tool()}, role="tester", max_steps=3)
    outcome = agent.run("s", "t")
    assert (outcome.exit, outcome.output, outcome.steps) == ("step_limit", None, 3)


def test_text_without_tool_calls_is_nudged_back_to_the_tools():
    model = ScriptedModel(["thinking aloud", call("submit", summary="x")])
    agent = Agent(model, {"submit": done_tool()}, role="tester")
    outcome = agent.run("s", "t")
    assert outcome.output == "x"
    assert "call `submit`" in model.requests[1][1][-1]["content"]


def test_budget_exhaustion_propagates_out_of_the_agent():
    tracker = BudgetTracker(Budget(max_calls=1))
    model = MeteredModel(ScriptedModel([call("echo", text="a"), call("echo", text="b")]), budget=tracker)
    agent = Agent(model, {"echo": echo_tool()}, role="tester")
    with pytest.raises(BudgetExceeded) as info:
        agent.run("s", "t")
    assert info.value.kind == "calls"


def test_observers_see_every_tool_call_and_step():
    seen, steps = [], []
    model = ScriptedModel([call("echo", text="a"), call("submit", summary="s")])
    agent = Agent(
        model,
        {"echo": echo_tool(), "submit": done_tool()},
        role="tester",
        on_tool=lambda role, name, args, result: seen.append((role, name, args, result.ok)),
        on_step=lambda role, step, reply: steps.append(step),
    )
    agent.run("s", "t")
    assert seen == [("tester", "echo", {"text": "a"}, True), ("tester", "submit", {"summary": "s"}, True)]
    assert steps == [1, 2]
