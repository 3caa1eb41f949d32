"""The run's trajectory: every model call and tool call, one typed JSON record a line.

`trajectory.jsonl` outlives the process: a killed run is resumed from it and a
finished one is replayed from it (`replay:PATH`). Each record is versioned and
appended atomically (one `write` of a whole line under an exclusive file lock,
then `fsync`), so several threads or processes may append to the same file and
a reader sees only whole records, apart from a torn last line left by a writer
that was killed mid-write, which readers skip and the next append removes.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from ground.errors import TwinError
from ground.model import Message, ModelReply, ToolSchema

SCHEMA_VERSION = 1
MAX_TOOL_RESULT_CHARS = 20_000
"""A tool result longer than this is stored with its middle cut out."""


class TrajectoryError(TwinError):
    """A trajectory file cannot be read: corrupt line or a newer format."""


class ModelRequest(BaseModel):
    """What was sent to the model (never the API key)."""

    messages: list[Message] = Field(description="The full message list of the call.")
    tools: list[ToolSchema] | None = Field(default=None, description="Tool schemas offered.")


class _Record(BaseModel):
    schema_version: int = Field(default=SCHEMA_VERSION, description="Record format version.")
    role: str = Field(description="Role that acted: 'diagnoser', 'migrator', 'verifier', 'agent'.")
    round: int = Field(default=0, description="Loop round, as set by the loop.")
    step: int = Field(default=0, description="Step within the round, as set by the loop.")
    time: float = Field(default_factory=time.time, description="Unix time the record was made.")


class ModelCallRecord(_Record):
    """One model call that returned an answer."""

    type: Literal["model_call"] = "model_call"
    index: int = Field(description="0-based position among this trajectory's model calls.")
    model: str = Field(description="Model string as given (e.g. 'openai/gpt-4o', 'replay:...').")
    label: str = Field(default="", description="'replayed from PATH', 'scripted', or the model.")
    request: ModelRequest = Field(description="Messages and tools sent.")
    reply: ModelReply = Field(description="The answer, tokens, cost and latency.")


class ModelErrorRecord(_Record):
    """One model call that failed, kept so that a failure is never mistaken for an answer."""

    type: Literal["model_error"] = "model_error"
    model: str = Field(description="Model string as given.")
    kind: Literal["infra", "request", "replay", "stopped"] = Field(
        description="'infra': provider/network after retries; 'request': refused; "
        "'replay': the replayed run diverged; 'stopped': the person or program answering stopped."
    )
    error: str = Field(description="The error message.")
    latency_s: float = Field(default=0.0, description="Time spent, retries included.")


class ToolCallRecord(_Record):
    """One tool call executed for the model."""

    type: Literal["tool_call"] = "tool_call"
    tool: str = Field(description="Tool name.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments as called.")
    result: str = Field(default="", description="What the model was shown (middle cut if long).")
    ok: bool = Field(default=True, description="False when the tool reported a failure.")
    duration_s: float = Field(default=0.0, description="Wall time of the tool call.")

    @field_validator("result")
    @classmethod
    def _truncate(cls, value: str) -> str:
        return truncate_middle(value, MAX_TOOL_RESULT_CHARS)


TrajectoryRecord = Annotated[
    ModelCallRecord | ModelErrorRecord | ToolCallRecord, Field(discriminator="type")
]
_RECORD = TypeAdapter(TrajectoryRecord)


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of `text` within about `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}"


class TrajectoryContext(BaseModel):
    """Labels the loop sets so that records say where in the run they were made."""

    model_config = ConfigDict(extra="forbid")

    round: int = 0
    step: int = 0


class Trajectory:
    """An append-only `trajectory.jsonl`.

    Args:
        path: the file; its directory is created on the first append.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.context = TrajectoryContext()
        self._lock = threading.Lock()
        self._next_index: int | None = None

    def set_context(self, **labels: int) -> None:
        """Set the round/step labels that later records carry (e.g. `round=2, step=0`)."""
        self.context = TrajectoryContext.model_validate({**self.context.model_dump(), **labels})

    def next_model_call_index(self) -> int:
        """Reserve the index of the next model call (continues a resumed file)."""
        with self._lock:
            if self._next_index is None:
                self._next_index = sum(isinstance(r, ModelCallRecord) for r in self.records())
            index = self._next_index
            self._next_index += 1
            return index

    def append(self, record: ModelCallRecord | ModelErrorRecord | ToolCallRecord) -> None:
        """Append one record as one line, atomically, and fsync it."""
        line = (json_line(record) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                _drop_torn_tail(fd)
                written = os.write(fd, line)
                while written < len(line):  # only on a full disk or a signal
                    written += os.write(fd, line[written:])
                os.fsync(fd)
            finally:
                os.close(fd)  # also releases the lock

    def records(self) -> list[ModelCallRecord | ModelErrorRecord | ToolCallRecord]:
        """All whole records, in order; an unfinished last line is skipped.

        Raises:
            TrajectoryError: a finished line is not a valid record, or its version is newer.
        """
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        lines.pop()  # the torn tail of a killed writer, or b"" after the last newline
        out = []
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            out.append(self._parse(raw, number))
        return out

    def model_calls(self) -> list[ModelCallRecord]:
        """Only the model calls that returned an answer, in order."""
        return [r for r in self.records() if isinstance(r, ModelCallRecord)]

    def _parse(
        self, raw: bytes, number: int
    ) -> ModelCallRecord | ModelErrorRecord | ToolCallRecord:
        where = f"{self.path}:{number}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"{where}: not a JSON line ({exc.msg})") from None
        version = obj.get("schema_version") if isinstance(obj, dict) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise TrajectoryError(
                f"{where}: record format {version} is newer than this twin reads "
                f"({SCHEMA_VERSION}); upgrade twin"
            )
        try:
            return _RECORD.validate_python(obj)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise TrajectoryError(
                f"{where}: not a trajectory record ({loc}: {first['msg']})"
            ) from None


def _drop_torn_tail(fd: int) -> None:
    """Cut an unfinished last line (a writer killed mid-line) so the next line starts clean."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    chunk = 1 << 16
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            os.ftruncate(fd, start + newline + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def json_line(record: BaseModel) -> str:
    """A record's JSON; text a model sent that UTF-8 cannot hold (lone surrogates) becomes U+FFFD.

    A model can send any JSON string, including "\\ud800"; the record keeps what can be
    written instead of ending the run.
    """
    try:
        return record.model_dump_json()
    except ValueError:
        return type(record).model_validate(_scrub(record.model_dump())).model_dump_json()


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value
