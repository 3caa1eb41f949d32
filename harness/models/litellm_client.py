"""The live model client: any litellm model string. The only module that imports litellm.

litellm is imported on the first call, never at import time (it takes seconds),
with its price map read from the installed package (never fetched) and its
logging quiet. Retries are ours, not litellm's or the OpenAI SDK's, so that
their number is known and each failure is classified exactly once:

- rate limits, 5xx, timeouts and refused connections are retried with
  exponential backoff (honouring `Retry-After`), then raised as `ModelInfraError`;
- auth, permission, not-found, context-window and other bad requests are raised
  at once as `ModelRequestError`.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from typing import Any

from ground.model import (
    Message,
    ModelInfraError,
    ModelReply,
    ModelRequestError,
    ToolCall,
    ToolSchema,
    Usage,
)
from harness.models.cache import ResponseCache
from harness.models.config import ModelConfig

MAX_BACKOFF_S = 60.0
_litellm: Any = None


def _import_litellm() -> Any:
    global _litellm
    if _litellm is None:
        # Read before import: otherwise litellm downloads its price map at import time.
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm

        litellm.suppress_debug_info = True
        litellm.set_verbose = False
        litellm.telemetry = False
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx"):
            logging.getLogger(name).setLevel(logging.ERROR)
        _litellm = litellm
    return _litellm


class LiteLLMModel:
    """A live model through litellm.

    Args:
        config: the model's settings; its name is a litellm model string: 'anthropic/claude-…',
            'openai/gpt-…', 'ollama/qwen2.5-coder', or 'openai/<name>' with an api base for any
            OpenAI-compatible server. Temperature and max_tokens None: the provider's defaults;
            `retries` count after the first attempt, for infrastructure failures only; the first
            backoff doubles each retry, with jitter, capped at 60 s.
        api_base: the base URL to use (the config's, or an environment override; None: the provider's).
        api_key: key override; otherwise litellm reads the provider's env var.
        cache: optional on-disk response cache.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.name = config.name
        self.label = config.name
        self.api_base = api_base
        self._api_key = api_key
        self.temperature = config.temperature
        self.max_tokens = config.max_tokens
        self.timeout_s = config.timeout_s
        self.max_retries = config.retries
        self.backoff_s = config.backoff_s
        self.cache = cache

    def __repr__(self) -> str:  # never shows the key
        return f"LiteLLMModel({self.name!r}, api_base={self.api_base!r})"

    def settings(self) -> dict[str, Any]:
        """What besides the messages decides the answer (the cache key uses it)."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """Ask the model; see `ground.model.Model.query`."""
        key = None
        if self.cache is not None:
            key = self.cache.key(self.name, self.api_base, messages, tools, self.settings())
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        reply = self._query_live(messages, tools)
        if self.cache is not None and key is not None:
            self.cache.put(key, reply, model=self.name)
        return reply

    def _query_live(self, messages: list[Message], tools: list[ToolSchema] | None) -> ModelReply:
        litellm = _import_litellm()
        kwargs: dict[str, Any] = {
            "model": self.name,
            "messages": messages,
            "timeout": self.timeout_s,
            "num_retries": 0,
            "max_retries": 0,  # the OpenAI SDK under litellm retries twice by default
            "drop_params": True,
        }
        if tools:
            kwargs["tools"] = tools
        if uses_cache_control(self.name):
            kwargs["messages"] = with_cache_control(messages)
        optional = {
            "api_base": self.api_base,
            "api_key": self._api_key,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        kwargs.update({k: v for k, v in optional.items() if v is not None})
        if self.api_base and "api_key" not in kwargs and _needs_placeholder_key(self.name):
            # Local OpenAI-compatible servers (vLLM, llama.cpp, ollama) want no key, but the
            # OpenAI SDK refuses to send a request without one.
            kwargs["api_key"] = "no-key"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                response = litellm.completion(**kwargs)
                break
            except Exception as exc:
                verdict = _classify(litellm, exc)
                if verdict is None:
                    raise
                if verdict == "refused":
                    raise ModelRequestError(
                        f"{self.name} refused the request: {_one_line(exc)}"
                    ) from exc
                if attempt > self.max_retries:
                    raise ModelInfraError(
                        f"{self.name}: infrastructure failure after {attempt} attempt(s) "
                        f"({time.monotonic() - started:.1f} s): {_one_line(exc)}"
                    ) from exc
                time.sleep(self._backoff(attempt, _retry_after(exc)))
        reply = _parse_response(response)
        reply.cost_usd = _cost(litellm, response)
        reply.latency_s = time.monotonic() - started
        return reply

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_BACKOFF_S)
        base = self.backoff_s * 2 ** (attempt - 1)
        return min(base * (0.5 + random.random()), MAX_BACKOFF_S)


def _needs_placeholder_key(name: str) -> bool:
    provider = name.split("/", 1)[0] if "/" in name else ""
    return provider in ("openai", "hosted_vllm") and not os.environ.get("OPENAI_API_KEY")


def _classify(litellm: Any, exc: Exception) -> str | None:
    """'retry' for infrastructure failures, 'refused' for bad requests, None for bugs."""
    refused = (
        litellm.AuthenticationError,
        litellm.PermissionDeniedError,
        litellm.NotFoundError,
        litellm.BadRequestError,  # includes context window, content policy, unsupported params
        litellm.UnprocessableEntityError,
    )
    retried = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.APIConnectionError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, refused) or _missing_credentials(exc):
        return "refused"
    if isinstance(exc, retried):
        return "retry"
    import openai  # litellm's own dependency; its errors share the base class

    if isinstance(exc, openai.APIError | litellm.APIError):
        status = getattr(exc, "status_code", None)
        if status is None or status >= 500 or status in (408, 409, 429):
            return "retry"
        return "refused"
    return None


def _missing_credentials(exc: Exception) -> bool:
    """litellm reports a key that was never configured as a server error; it is a request error."""
    text = str(exc).lower()
    return "missing credentials" in text or ("api_key" in text and "must be set" in text)


def _retry_after(exc: Exception) -> float | None:
    """Seconds the provider asked us to wait, if it said."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or getattr(exc, "litellm_response_headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _one_line(exc: Exception, limit: int = 400) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parse_response(response: Any) -> ModelReply:
    message = response.choices[0].message
    calls = [
        # Some local servers send no id; tool messages must answer a unique one.
        ToolCall.from_raw(
            call.id or f"call_{uuid.uuid4().hex[:12]}",
            call.function.name or "",
            call.function.arguments,
        )
        for call in getattr(message, "tool_calls", None) or []
    ]
    return ModelReply(content=message.content or "", tool_calls=calls, usage=usage_of(getattr(response, "usage", None)))


def usage_of(usage: Any) -> Usage:
    """The reply's token counts, with the prompt tokens a provider cache served or stored.

    OpenAI-style providers report cached tokens in `prompt_tokens_details.cached_tokens`;
    Anthropic's `cache_read_input_tokens` and `cache_creation_input_tokens` come through
    litellm as attributes of the usage.
    """

    def number(holder: Any, name: str) -> int:
        value = holder.get(name) if isinstance(holder, dict) else getattr(holder, name, None)
        return int(value) if isinstance(value, int | float) and value >= 0 else 0  # nonsense: not reported

    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        prompt_tokens=number(usage, "prompt_tokens"),
        completion_tokens=number(usage, "completion_tokens"),
        cached_tokens=max(number(details, "cached_tokens"), number(usage, "cache_read_input_tokens")),
        cache_write_tokens=number(usage, "cache_creation_input_tokens"),
    )


CACHE_CONTROL = {"type": "ephemeral"}
"""Anthropic's prompt-cache marker: the prefix up to and including a marked block is cached."""


def uses_cache_control(name: str) -> bool:
    """Whether a model caches prompts only where the request marks it (Anthropic's models,
    directly or through Bedrock and Vertex); others (OpenAI, DeepSeek, …) cache a repeated prefix by themselves."""
    return "anthropic/" in name or "claude" in name.lower()


def with_cache_control(messages: list[Message]) -> list[Message]:
    """A copy of `messages` with the cache marker on the system prompt, the task message and the
    last message: the stable prefix (tools, system, task) is read from the cache in every later call
    of the role, and the conversation so far in the next call (Anthropic allows four markers)."""
    marked = [dict(m) for m in messages]
    points = {0, 1, len(marked) - 1} if len(marked) > 1 else {0}
    for i in sorted(points):
        if i >= len(marked) or marked[i].get("role") not in ("system", "user", "tool"):
            continue
        content = marked[i].get("content")
        if isinstance(content, str) and content:
            marked[i]["content"] = [{"type": "text", "text": content, "cache_control": CACHE_CONTROL}]
    return marked


DEFAULT_TOKENIZER = "gpt-4o"
"""The tokenizer twin counts with when the model's own is unknown (an outside program, a person)."""


def estimate_usage(
    messages: list[Message], tools: list[ToolSchema] | None, reply_text: str, *, model: str | None = None
) -> Usage:
    """Count a call's tokens with litellm's `token_counter` when the reply reported none.

    Uses `model`'s tokenizer where litellm knows it, else `DEFAULT_TOKENIZER`'s; without
    litellm's tokenizers (a broken install) four characters count as one token. The result
    is marked `estimated`.
    """
    tokenizer = model if model and "/" in model else DEFAULT_TOKENIZER
    try:
        litellm = _import_litellm()
        prompt = litellm.token_counter(model=tokenizer, messages=messages, tools=tools or None)
        completion = litellm.token_counter(model=tokenizer, text=reply_text, count_response_tokens=True)
    except Exception:  # a tokenizer that cannot load must not stop the run: a rough count instead
        prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4 + len(str(tools or "")) // 4
        completion = len(reply_text) // 4
    return Usage(prompt_tokens=int(prompt), completion_tokens=int(completion), estimated=True)


def _cost(litellm: Any, response: Any) -> float:
    """litellm's price for the call; 0.0 for models it has no price for (local, unknown)."""
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:  # unknown model: litellm raises rather than returning 0
        return 0.0
    return float(cost or 0.0)
