"""The cost benchmark's split of prompt tokens by role and by what they are spent on."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ground.model import Usage

SPEC = importlib.util.spec_from_file_location("cost_benchmark", Path(__file__).parents[2] / "benchmarks" / "cost.py")
cost = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cost)

TOOL = {"type": "function", "function": {"name": "bash", "description": "Run a command. " * 20, "parameters": {}}}


def call(role: str, messages: list[dict], tools: list[dict] | None = None):
    request = {"messages": messages, "tools": tools}
    return cost.ModelCallRecord.model_validate(
        {"role": role, "index": 0, "model": "scripted", "request": request, "reply": {}}
    )


def characters(messages, tools, reply_text):
    """A stand-in token counter (litellm's loads its tokenizers for seconds): one token per 4 characters."""
    return Usage(prompt_tokens=len(json.dumps([messages, tools or []])) // 4, estimated=True)


def test_prompt_tokens_are_split_by_role_and_by_kind(monkeypatch):
    monkeypatch.setattr(cost, "estimate_usage", characters)
    system = {"role": "system", "content": "You are the Verifier. " * 50}
    task = {"role": "user", "content": "Migrate calc. " * 30}
    reply = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
    }
    output = {"role": "tool", "tool_call_id": "1", "name": "bash", "content": "calc.py\n" * 40}
    nudge = {"role": "user", "content": "Use the tools to work."}
    calls = [
        call("verifier", [system, task], [TOOL]),
        call("verifier", [system, task, reply, output, nudge], [TOOL]),
        call("agent", [system, task]),
    ]
    split = cost.tokens_by_kind(calls)
    assert set(split) == {"agent", "verifier"} and set(split["agent"]) == {"system", "task"}
    verifier = split["verifier"]
    assert list(verifier) == ["system", "tools", "task", "replies", "tool outputs", "other"]
    assert verifier["system"] == 2 * split["agent"]["system"] and verifier["task"] == 2 * split["agent"]["task"]
    assert verifier["system"] > verifier["task"] > verifier["other"] > 0 and verifier["tools"] > 0
    whole = sum(c.reply.usage.prompt_tokens for c in calls)  # the calls carry no usage: count them whole
    counted = sum(characters(c.request.messages, c.request.tools, "").prompt_tokens for c in calls)
    parts = sum(sum(p.values()) for p in split.values())
    assert whole == 0 and 0.9 * counted <= parts <= 1.1 * counted  # each part is counted with its own framing
