from __future__ import annotations

import json

import pytest

from ground.model import ModelReply, ToolCall, Usage


@pytest.mark.parametrize(
    "raw, arguments, kept",
    [
        ('{"path": "/app/x.py"}', {"path": "/app/x.py"}, None),
        ({"n": 1}, {"n": 1}, None),
        ("", {}, None),
        (None, {}, None),
        ('{"path": ', {}, '{"path": '),
        ('"just a string"', {}, '"just a string"'),
        ("[1, 2]", {}, "[1, 2]"),
    ],
)
def test_tool_call_from_raw(raw, arguments, kept):
    call = ToolCall.from_raw("c1", "read_file", raw)
    assert call.arguments == arguments
    assert call.arguments_raw == kept


def test_text_reply_as_message():
    assert ModelReply(content="done").as_message() == {"role": "assistant", "content": "done"}


def test_tool_reply_as_message_round_trips_arguments():
    reply = ModelReply(
        tool_calls=[
            ToolCall(id="a", name="bash", arguments={"cmd": "ls"}),
            ToolCall.from_raw("b", "bash", "{broken"),
        ]
    )
    message = reply.as_message()
    assert message["content"] is None
    first, second = message["tool_calls"]
    assert first == {
        "id": "a",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})},
    }
    assert second["function"]["arguments"] == "{broken"


def test_usage_totals_and_defaults():
    assert Usage(prompt_tokens=3, completion_tokens=4).total_tokens == 7
    reply = ModelReply()
    assert (reply.content, reply.tool_calls, reply.cost_usd, reply.cached) == ("", [], 0.0, False)


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens"])
def test_a_negative_token_count_is_refused(field):
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Usage(**{field: -1})
    assert getattr(Usage(**{field: 0}), field) == 0
