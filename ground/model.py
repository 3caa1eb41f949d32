"""The model protocol and the types every model speaks.

A model takes an OpenAI-format message list (and optional tool schemas) and
returns a `ModelReply`. Implementations (live via litellm, replayed, scripted)
do not inherit from `Model`; they only match it. No provider SDK is imported
here.

Failures are split by who is to blame:
- `ModelInfraError`: the provider or the network failed (rate limits, 5xx,
  timeouts, refused connections) and retries did not help. Not a bad answer.
- `ModelRequestError`: the request itself was refused (auth, unknown model,
  context window, bad request). Retrying would not help.
- `ReplayDivergence`: a replayed run asked for something the recording did not.
- `ModelStopped`: the one answering (a person, an outside program) stopped or gave
  an unusable answer; the run stops cleanly and can be resumed.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, Field

from ground.errors import TwinError
from ground.untrusted_json import UntrustedJSONError, loads_untrusted

Message = dict[str, Any]
"""One chat message in OpenAI format: `{"role": ..., "content": ..., ...}`."""

ToolSchema = dict[str, Any]
"""One tool in OpenAI format: `{"type": "function", "function": {"name": ..., ...}}`."""


class ToolCall(BaseModel):
    """A function call the model asked for."""

    id: str = Field(description="The provider's id; tool messages answer it by this id.")
    name: str = Field(description="Name of the tool to call.")
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="Parsed JSON arguments; empty when the model sent something unparsable.",
    )
    arguments_raw: str | None = Field(
        default=None,
        description="The argument text exactly as sent, kept only when it was not a JSON object.",
    )

    @classmethod
    def from_raw(cls, id: str, name: str, raw: str | dict[str, Any] | None) -> ToolCall:
        """Build a call from the provider's argument text, keeping bad JSON verbatim."""
        if isinstance(raw, dict):
            return cls(id=id, name=name, arguments=raw)
        text = raw or ""
        if not text.strip():
            return cls(id=id, name=name)
        try:
            parsed = loads_untrusted(text)
        except UntrustedJSONError:  # bad syntax, nesting, a number Python refuses: kept verbatim, refused
            return cls(id=id, name=name, arguments_raw=text)
        if not isinstance(parsed, dict):
            return cls(id=id, name=name, arguments_raw=text)
        return cls(id=id, name=name, arguments=parsed)


class Usage(BaseModel):
    """Tokens of one call; no count is below zero (a negative one would give a budget back)."""

    prompt_tokens: int = Field(default=0, ge=0, description="Tokens sent (the whole prompt, cached part included).")
    completion_tokens: int = Field(default=0, ge=0, description="Tokens generated.")
    cached_tokens: int = Field(
        default=0, ge=0, description="Prompt tokens the provider read from its prompt cache (billed at a discount)."
    )
    cache_write_tokens: int = Field(
        default=0,
        ge=0,
        description="Prompt tokens the provider wrote to its prompt cache (Anthropic bills them extra).",
    )
    estimated: bool = Field(
        default=False,
        description="True when the one answering reported no usage (inbox, human, an old recording) and twin "
        "counted the tokens itself with a tokenizer: an estimate, not the provider's count.",
    )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def reported(self) -> bool:
        """Whether any count came with the reply (a reply with none is estimated by twin)."""
        return bool(self.prompt_tokens or self.completion_tokens)


class ModelReply(BaseModel):
    """One assistant turn and what it cost."""

    content: str = Field(default="", description="Assistant text ('' when it only calls tools).")
    tool_calls: list[ToolCall] = Field(default_factory=list, description="Calls, in order.")
    usage: Usage = Field(
        default_factory=Usage, description="Token counts reported by the provider."
    )
    cost_usd: float = Field(
        default=0.0, ge=0.0, description="Price in dollars; 0.0 where unknown, cached, replayed or local."
    )
    latency_s: float = Field(default=0.0, description="Wall time of the call, retries included.")
    cached: bool = Field(default=False, description="Served from the on-disk response cache.")

    def as_message(self) -> Message:
        """The assistant message in OpenAI format, to append to the history."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            # Several providers refuse an empty text block next to tool calls.
            message["content"] = self.content or None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments_raw
                        if call.arguments_raw is not None
                        else json.dumps(call.arguments),
                    },
                }
                for call in self.tool_calls
            ]
        return message


class Model(Protocol):
    """Anything that answers a conversation. Implementations need not inherit from this."""

    name: str

    def query(
        self,
        messages: list[Message],
        tools: list[ToolSchema] | None = None,
        *,
        role: str = "agent",
    ) -> ModelReply:
        """Answer `messages`, optionally by calling some of `tools`.

        Args:
            messages: the conversation so far, OpenAI format.
            tools: function schemas the model may call.
            role: which role is asking ('diagnoser', 'migrator', ...); recorded, not sent.

        Raises:
            ModelInfraError: provider or network failure after retries.
            ModelRequestError: the provider refused the request.
            BudgetExceeded: a budget was already used up before the call.
        """
        ...


class ModelInfraError(TwinError):
    """The provider or network failed and retries were exhausted; not the model's answer."""


class ModelRequestError(TwinError):
    """The provider refused the request (auth, unknown model, context window, bad request)."""


class ReplayDivergence(TwinError):
    """A replayed run's request differs from the recording; the message says where."""


class ModelStopped(TwinError):
    """The person or program answering stopped (quit, no reply in time, unusable replies).

    Not a failure of the candidate or of the infrastructure: the run stops cleanly
    and `twin migrate --resume` continues it.
    """

    exit_code = 75  # EX_TEMPFAIL: try again later
