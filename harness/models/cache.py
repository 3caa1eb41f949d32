"""An optional on-disk cache of model replies.

The key is a hash of everything that decides the answer: model string, base
URL, messages, tools and settings (temperature, max_tokens) — never the API
key. A cached reply costs nothing (`cost_usd == 0`, `cached == True`) but keeps
its token counts, so a token budget stops a cached re-run where it stopped the
original. Entries are written atomically (temporary file, then rename); an
unreadable entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ground.model import Message, ModelReply, ToolSchema
from ground.trajectory import json_line

CACHE_SCHEMA_VERSION = 1


class CacheEntry(BaseModel):
    """One cached reply."""

    schema_version: int = Field(default=CACHE_SCHEMA_VERSION, description="Entry format version.")
    model: str = Field(description="Model string the reply came from.")
    reply: ModelReply = Field(description="The reply as it was received.")


class ResponseCache:
    """Replies keyed on the request, one JSON file each under `directory`.

    Args:
        directory: created on first write.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @staticmethod
    def key(
        model: str,
        api_base: str | None,
        messages: list[Message],
        tools: list[ToolSchema] | None,
        settings: dict[str, Any],
    ) -> str:
        """The hex digest identifying a request."""
        material = {
            "model": model,
            "api_base": api_base,
            "messages": messages,
            "tools": tools,
            "settings": settings,
        }
        canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> ModelReply | None:
        """The cached reply, marked cached and free, or None."""
        path = self._path(key)
        try:
            entry = CacheEntry.model_validate_json(path.read_text())
        except (OSError, ValidationError):
            return None
        if entry.schema_version != CACHE_SCHEMA_VERSION:
            return None
        return entry.reply.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0})

    def put(self, key: str, reply: ModelReply, *, model: str = "") -> None:
        """Store a reply (atomically: readers see the old entry or the whole new one)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = CacheEntry(model=model, reply=reply.model_copy(update={"cached": False}))
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(json_line(entry))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
