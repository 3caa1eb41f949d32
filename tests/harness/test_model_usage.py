"""Every call's tokens are counted: provider caches through litellm's real request path, and twin's
own estimate where a reply reports no usage (an outside program, a person, an old recording)."""

from __future__ import annotations

import json

import pytest

from ground.model import ModelReply, ToolCall, Usage
from ground.trajectory import Trajectory
from harness.models.budget import Budget, BudgetTracker
from harness.models.config import ModelConfig
from harness.models.factory import MeteredModel, make_model
from harness.models.litellm_client import estimate_usage, uses_cache_control, with_cache_control
from tests.fakes import FakeOpenAIServer, anthropic_tool_use, text

SYSTEM = {"role": "system", "content": "You are the Migrator. " * 50}
TASK = {"role": "user", "content": "# The task\nPort the model. " * 50}
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def conversation(turns: int) -> list[dict]:
    messages = [SYSTEM, TASK]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "name": "read_file", "content": f"output {i}"},
        ]
    return messages


def test_anthropic_requests_mark_the_stable_prefix_and_the_last_message_for_the_cache(tmp_path):
    reply = anthropic_tool_use(
        "read_file", {}, input_tokens=900, cache_read_input_tokens=700, cache_creation_input_tokens=150
    )
    with FakeOpenAIServer([reply]) as server:
        config = ModelConfig(name="anthropic/claude-sonnet-4-5", api_base=server.base_url.removesuffix("/v1"))
        model = make_model(config, api_key="sk-x")
        answer = model.query(conversation(2), [TOOL])
        (request,) = server.requests
    assert request.path.endswith("/messages")
    body = request.body
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    task_block = body["messages"][0]["content"][0]
    assert task_block["text"].startswith("# The task") and task_block["cache_control"] == {"type": "ephemeral"}
    last = body["messages"][-1]["content"][-1]  # the latest tool result: the next call reads up to here
    assert last["type"] == "tool_result" and '"cache_control": {"type": "ephemeral"}' in json.dumps(last)
    assert "cache_control" not in json.dumps(body["messages"][1:-1])
    assert answer.usage.cached_tokens == 700 and answer.usage.cache_write_tokens == 150
    assert not answer.usage.estimated


def test_openai_requests_are_sent_unmarked_and_cached_tokens_are_read_from_the_details():
    scripted = text("ok", prompt_tokens=1200, completion_tokens=4)
    scripted.body["usage"]["prompt_tokens_details"] = {"cached_tokens": 1024}
    with FakeOpenAIServer([scripted]) as server:
        budget = BudgetTracker(Budget())
        config = ModelConfig(name="openai/gpt-4o-mini", api_base=server.base_url)
        model = make_model(config, api_key="sk-x", budget=budget)
        reply = model.query(conversation(1))
        (request,) = server.requests
    assert request.body["messages"][0] == SYSTEM  # OpenAI caches a repeated prefix without markers
    assert reply.usage.cached_tokens == 1024
    assert budget.spent.tokens_cached == 1024 and budget.spent.tokens_estimated == 0


@pytest.mark.parametrize(
    ("name", "marked"),
    [
        ("anthropic/claude-sonnet-4-5", True),
        ("bedrock/anthropic.claude-3-5-sonnet", True),
        ("openai/gpt-4o", False),
        ("ollama/qwen2.5-coder", False),
    ],
)
def test_only_models_that_need_markers_get_them(name, marked):
    assert uses_cache_control(name) is marked


def test_marking_never_changes_the_conversation_it_was_given():
    messages = conversation(1)
    marked = with_cache_control(messages)
    assert messages == conversation(1)
    assert isinstance(marked[0]["content"], list) and marked[2] == messages[2]  # an assistant turn stays as it is


class Silent:
    """Answers like an outside program that reports no usage."""

    name = "inbox:/tmp/x"

    def query(self, messages, tools=None, *, role="agent"):
        return ModelReply(tool_calls=[ToolCall(id="c1", name="submit", arguments={"summary": "done " * 40})])


def test_a_reply_without_usage_is_counted_with_a_tokenizer_and_marked_estimated(tmp_path):
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    budget = BudgetTracker(Budget())
    reply = MeteredModel(Silent(), trajectory=trajectory, budget=budget).query(conversation(3), [TOOL])
    assert reply.usage.estimated
    assert reply.usage.prompt_tokens > 200 and reply.usage.completion_tokens > 20
    (record,) = trajectory.model_calls()
    assert record.reply.usage == reply.usage  # the recording keeps the estimate, marked
    spent = budget.spent
    assert spent.tokens == reply.usage.total_tokens == spent.tokens_estimated
    assert "(all estimated)" in spent.tokens_text()


def test_longer_prompts_estimate_more_tokens():
    short = estimate_usage(conversation(1), None, "")
    long = estimate_usage(conversation(20), [TOOL], "x " * 100)
    assert 0 < short.prompt_tokens < long.prompt_tokens and long.completion_tokens > short.completion_tokens


def test_reported_usage_is_kept_as_reported():
    class Reporting(Silent):
        def query(self, messages, tools=None, *, role="agent"):
            return ModelReply(content="hi", usage=Usage(prompt_tokens=7, completion_tokens=1))

    reply = MeteredModel(Reporting()).query(conversation(1))
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.estimated) == (7, 1, False)
