"""Reusable fakes for tests: a local OpenAI-compatible chat server."""

from tests.fakes.openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Scripted,
    anthropic_tool_use,
    error,
    text,
    tool_call,
    tool_calls,
)

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Scripted",
    "anthropic_tool_use",
    "error",
    "text",
    "tool_call",
    "tool_calls",
]
