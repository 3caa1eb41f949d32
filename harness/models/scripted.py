"""`scripted:PATH`: a model that answers from a fixed list of replies (tests, demos).

The file is a JSON or YAML list; each entry is either a string (an assistant
text) or an object::

    - "I will look at the source first."
    - content: "Reading it."
      tool_calls:
        - {name: read_file, arguments: {path: /source/model.py}}
      usage: {prompt_tokens: 120, completion_tokens: 12}

Tool calls without an `id` get `call_<n>`. Running out of replies is an error,
not a silent empty answer. The requests are not checked (use `replay:` for that).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ground.errors import TwinError
from ground.model import Message, ModelReply, ToolCall, ToolSchema, Usage


class ScriptExhausted(TwinError):
    """The scripted model was asked for more replies than it has."""


def parse_scripted_reply(entry: Any, number: int) -> ModelReply:
    """One script entry (a string or an object) as a `ModelReply`."""
    if isinstance(entry, str):
        return ModelReply(content=entry)
    if not isinstance(entry, dict):
        raise TwinError(f"scripted reply {number}: expected a string or an object, got {entry!r}")
    unknown = set(entry) - {"content", "tool_calls", "usage", "cost_usd"}
    if unknown:
        raise TwinError(f"scripted reply {number}: unknown field(s) {sorted(unknown)}")
    try:
        calls = [
            ToolCall.from_raw(
                str(call.get("id") or f"call_{number}_{i}"), call["name"], call.get("arguments")
            )
            for i, call in enumerate(entry.get("tool_calls") or [])
        ]
        return ModelReply(
            content=entry.get("content") or "",
            tool_calls=calls,
            usage=Usage.model_validate(entry.get("usage") or {}),
            cost_usd=float(entry.get("cost_usd", 0.0)),
        )
    except (KeyError, TypeError, AttributeError, ValueError, ValidationError) as exc:
        raise TwinError(f"scripted reply {number}: malformed ({exc})") from None


class ScriptedModel:
    """Answers each query with the next reply of a script.

    Args:
        replies: `ModelReply` objects, strings or script objects (see the module doc).
        name: how the model is named in records.
    """

    def __init__(self, replies: list[Any], *, name: str = "scripted") -> None:
        self.name = name
        self.label = "scripted"
        self.replies = [
            r if isinstance(r, ModelReply) else parse_scripted_reply(r, i)
            for i, r in enumerate(replies)
        ]
        self.requests: list[tuple[str, list[Message], list[ToolSchema] | None]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path) -> ScriptedModel:
        """Load a JSON (`.json`) or YAML (anything else) script.

        Raises:
            TwinError: missing file, unparsable file, or not a list of replies.
        """
        path = Path(path)
        try:
            raw = path.read_text()
        except OSError as exc:
            raise TwinError(f"scripted model: cannot read {path}: {exc.strerror}") from None
        try:
            if path.suffix == ".json":
                data = json.loads(raw)
            else:
                import yaml

                data = yaml.safe_load(raw)
        except Exception as exc:  # json and yaml raise different types
            detail = " ".join(str(exc).split())
            raise TwinError(f"scripted model: {path} is not valid JSON/YAML: {detail}") from None
        if not isinstance(data, list):
            raise TwinError(f"scripted model: {path} must hold a list of replies")
        return cls(data, name=f"scripted:{path}")

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """The next scripted reply."""
        with self._lock:
            number = len(self.requests)
            if number >= len(self.replies):
                raise ScriptExhausted(
                    f"{self.name}: asked for reply {number + 1} "
                    f"but the script has {len(self.replies)}"
                )
            self.requests.append((role, list(messages), tools))
            return self.replies[number].model_copy(deep=True)
