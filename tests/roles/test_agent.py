from __future__ import annotations

import pytest

from ground.errors import BudgetExceeded
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


def test_older_long_tool_outputs_are_sent_cut_and_recent_ones_whole():
    from roles.agent import ContextPolicy

    replies = [call("echo", text=f"{i}" * 3000) for i in range(7)] + [call("submit", summary="done")]
    model = ScriptedModel(replies)
    policy = ContextPolicy(keep_whole=2, old_output_chars=400)
    agent = Agent(model, {"echo": echo_tool(), "submit": done_tool()}, role="tester", context=policy)
    outcome = agent.run("system text", "task text")
    last_request = model.requests[-1][1]
    sent = [m["content"] for m in last_request if m["role"] == "tool"]
    assert len(sent) == 7
    # cut two at a time: with 7 outputs, the first 4 are cut and the last 3 whole
    assert all("older tool output are not repeated" in text and len(text) < 700 for text in sent[:4])
    assert sent[4:] == [f"echo: {str(i) * 3000}" for i in range(4, 7)]
    # the conversation itself, and the role's result, keep every output whole
    assert [m["content"] for m in outcome.messages if m["role"] == "tool"][0] == f"echo: {'0' * 3000}"
    # short outputs are never cut, old or not
    assert (
        ContextPolicy(keep_whole=1, old_output_chars=400).apply([{"role": "tool", "content": "short"}] * 5)
        == [{"role": "tool", "content": "short"}] * 5
    )


@pytest.mark.parametrize(("outputs", "cut"), [(1, 0), (2, 0), (3, 0), (4, 2), (5, 2), (6, 4)])
def test_outputs_are_cut_in_steps_so_the_prompt_prefix_stays_put_between_cuts(outputs, cut):
    from roles.agent import ContextPolicy

    messages = [{"role": "tool", "content": "x" * 1000}] * outputs
    sent = ContextPolicy(keep_whole=2, old_output_chars=200).apply(messages)
    assert sum(m["content"] != "x" * 1000 for m in sent) == cut


def conversation(outputs: int, size: int, tool: str = "echo") -> list[dict]:
    messages = [{"role": "system", "content": "S" * 5000}, {"role": "user", "content": "T" * 5000}]
    for i in range(outputs):
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "function": {}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "name": tool, "content": f"{i}:" + "o" * size})
    return messages


def test_a_long_conversation_sends_older_outputs_as_summaries_and_keeps_the_task_and_the_last_turns():
    from roles.agent import ContextPolicy, conversation_chars

    policy = ContextPolicy(keep_whole=2, old_output_chars=50_000, max_chars=40_000)
    messages = conversation(12, 5000)
    messages[2 * 3 + 3]["name"] = "write_probe"  # output 3 is the latest evidence
    sent = policy.apply(messages)
    assert conversation_chars(messages) > 60_000 and conversation_chars(sent) < 30_000
    assert sent[:2] == messages[:2]  # the system prompt and the task message, whole
    tools = [m for m in sent if m["role"] == "tool"]
    summarized = [m["content"].startswith("[older output of echo, 5,002 characters, summarized") for m in tools]
    # every older output but the latest evidence; the last turns whole
    assert summarized == [True] * 3 + [False] + [True] * 6 + [False] * 2
    assert tools[-2:] == [m for m in messages if m["role"] == "tool"][-2:]  # the last turns whole
    assert "it began: 0:ooo" in tools[0]["content"]
    assert policy.apply(messages) == sent  # a pure function of the conversation: a replay sends the same
    assert messages[3]["content"] == "0:" + "o" * 5000  # the conversation itself keeps every output


def test_a_conversation_under_its_size_is_never_summarized():
    from roles.agent import ContextPolicy

    messages = conversation(6, 1000)
    assert ContextPolicy(keep_whole=2, old_output_chars=50_000, max_chars=400_000).apply(messages) == messages


@pytest.mark.parametrize("outputs", [10, 11, 12, 13, 14])
def test_summaries_come_oldest_first_so_the_prefix_stays_put_while_the_conversation_grows(outputs):
    from roles.agent import ContextPolicy

    policy = ContextPolicy(keep_whole=2, old_output_chars=50_000, max_chars=60_000)
    before = [m["content"] for m in policy.apply(conversation(outputs, 3000)) if m["role"] == "tool"]
    after = [m["content"] for m in policy.apply(conversation(outputs + 1, 3000)) if m["role"] == "tool"]
    kept = [text for text in before if text.startswith("[older output")]
    assert after[: len(kept)] == kept  # what was summarized before is sent again unchanged
