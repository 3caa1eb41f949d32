"""`inbox:DIR`: an outside program is the model, answering through files.

For each model call twin writes `DIR/request-<n>.json` (see `InboxRequest`) and
waits for `DIR/reply-<n>.json`: an OpenAI-style assistant message,
`{"content": "...", "tool_calls": [{"id": "...", "function": {"name": "...",
"arguments": "{...}"}}]}`. Both sides write a temporary name first and rename it,
so neither ever reads half a file. `n` only grows, across resumes too, so a late
reply can never answer a newer request.

DIR belongs to the outside program, which may run as another uid: twin holds DIR open
and does every read, write and rename in it through `ground.untrusted_io.Folder`.
A link planted at any name twin writes is replaced, never written through; a reply
that is a link, a FIFO or any other non-regular file, or larger than
`MAX_REPLY_BYTES`, is a malformed reply (refused unread), and reading it never holds
twin past the wait time.

A reply is checked against the request's tools (known name, arguments that are a
JSON object valid for the tool's parameter schema, unique call ids). A malformed
reply is renamed to `reply-<n>.rejected.json`, the reason is written to
`error-<n>.json`, and the program gets one more try at `reply-<n>.json`; a second
malformed reply, or no reply within the wait time, stops the run cleanly
(`ModelStopped`) and the request is renamed to `expired-<n>.json`. The run is then
resumed with `twin migrate --resume RUN`.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console

from ground.errors import TwinError
from ground.model import Message, ModelReply, ModelStopped, ToolCall, ToolSchema, Usage
from ground.terminal import agent_console
from ground.trajectory import Trajectory
from ground.untrusted_io import AgentFileError, Folder
from ground.untrusted_json import UntrustedJSONError, loads_untrusted

PROTOCOL = "twin-inbox/1"
POLL_S = 0.1
MAX_REPLY_BYTES = 16 << 20
REQUEST = re.compile(r"^request-(\d+)\.json$")
NUMBERED = re.compile(r"^(?:request|reply|error|expired)-(\d+)(?:\.rejected)?\.json$")


class BudgetLeft(BaseModel):
    """What the run may still spend; None where there is no limit."""

    tokens: int | None = None
    usd: float | None = None
    calls: int | None = None
    wall_s: float | None = None


class InboxRequest(BaseModel):
    """`request-<n>.json`: one model call, for the outside program to answer."""

    protocol: str = Field(default=PROTOCOL, description="Format of this file.")
    n: int = Field(description="File number: the reply goes to reply-<n>.json.")
    call: int = Field(
        description="Position of this call in the run's conversation history (a resumed run "
        "repeats its unfinished step, so a call can come again with the same position)."
    )
    role: str = Field(description="Role asking: 'diagnoser', 'migrator', 'verifier' or 'agent'.")
    round: int = Field(description="Loop round.")
    step: int = Field(description="Model calls of this role in this round before this one.")
    messages: list[Message] = Field(description="The whole conversation, OpenAI chat format.")
    tools: list[ToolSchema] = Field(default_factory=list, description="Tools the reply may call.")
    budget_left: BudgetLeft = Field(default_factory=BudgetLeft, description="Budget still available.")
    attempt: int = Field(default=1, description="1, or 2 after a malformed reply.")
    reply_to: str = Field(description="The file name the reply must have.")


class InboxError(BaseModel):
    """`error-<n>.json`: why a reply was refused."""

    protocol: str = PROTOCOL
    n: int
    attempt: int
    error: str
    retry: bool = Field(description="True: write reply-<n>.json again; False: the run stopped.")


class MalformedReply(TwinError):
    """A reply that does not fit the request; the message says why."""


def parse_reply(data: Any, tools: list[ToolSchema], n: int, messages: list[Message] | None = None) -> ModelReply:
    """Check an OpenAI-style assistant message against the offered tools.

    Args:
        data: the parsed reply file.
        tools: the request's tool schemas.
        n: the request number (ids of calls without one are derived from it).
        messages: the request's conversation; a call id used in it before is refused.

    Raises:
        MalformedReply: not an assistant message, unknown tool, arguments that are not a
            JSON object or do not match the tool's schema, duplicate ids, or an empty reply.
    """
    if not isinstance(data, dict):
        raise MalformedReply("the reply must be a JSON object (an assistant message)")
    if data.get("role", "assistant") != "assistant":
        raise MalformedReply(f"role must be 'assistant', got {data.get('role')!r}")
    content = data.get("content")
    if content is not None and not isinstance(content, str):
        raise MalformedReply("content must be a string or null")
    raw_calls = data.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise MalformedReply("tool_calls must be a list")
    schemas = {(t.get("function") or {}).get("name"): (t.get("function") or {}) for t in tools}
    calls = [_tool_call(raw, i, n, schemas) for i, raw in enumerate(raw_calls)]
    ids = [c.id for c in calls]
    if len(set(ids)) != len(ids):
        raise MalformedReply(f"tool call ids must be unique, got {ids}")
    used = {c.get("id") for m in messages or [] for c in m.get("tool_calls") or []}
    if used & set(ids):
        raise MalformedReply(f"tool call id(s) {sorted(used & set(ids))} were used earlier in this conversation")
    if not calls and not (content or "").strip():
        raise MalformedReply("the reply has neither content nor tool_calls")
    try:
        usage = Usage.model_validate(data.get("usage") or {})
    except ValueError:
        raise MalformedReply("usage must be {prompt_tokens, completion_tokens}, whole numbers of 0 or more") from None
    return ModelReply(content=content or "", tool_calls=calls, usage=usage)


def _checked_reply(data: Any, tools: list[ToolSchema], n: int, messages: list[Message]) -> ModelReply:
    """`parse_reply`, where any failure to read the reply (a type, a size, a nesting, a value the
    checks did not foresee) is a `MalformedReply`, never a crash of the run."""
    try:
        return parse_reply(data, tools, n, messages)
    except MalformedReply:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise MalformedReply(f"reply-{n}.json cannot be read ({type(exc).__name__}: {reason})") from None


def _tool_call(raw: Any, i: int, n: int, schemas: dict[str, dict]) -> ToolCall:
    where = f"tool_calls[{i}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        raise MalformedReply(f'{where} must be {{"id": ..., "function": {{"name": ..., "arguments": ...}}}}')
    name, arguments = raw["function"].get("name"), raw["function"].get("arguments", {})
    if name not in schemas:
        raise MalformedReply(f"{where}: no tool named {name!r} in this request (tools: {sorted(schemas)})")
    if isinstance(arguments, str):
        try:
            arguments = loads_untrusted(arguments) if arguments.strip() else {}
        except UntrustedJSONError as exc:
            raise MalformedReply(f"{where} ({name}): arguments are {exc}") from None
    if not isinstance(arguments, dict):
        raise MalformedReply(f"{where} ({name}): arguments must be a JSON object")
    _check_arguments(arguments, schemas[name].get("parameters") or {}, f"{where} ({name})")
    return ToolCall(id=str(raw.get("id") or f"inbox_{n}_{i}"), name=name, arguments=arguments)


def _check_arguments(arguments: dict[str, Any], parameters: dict[str, Any], where: str) -> None:
    """Required names present, no unknown names, each value valid for its property's schema.

    Each property is checked with its own schema as the root, because the roles'
    schemas nest pydantic's `$defs` inside the property that uses them.
    """
    import jsonschema

    properties = parameters.get("properties") or {}
    missing = [p for p in parameters.get("required") or [] if p not in arguments]
    if missing:
        raise MalformedReply(f"{where}: missing argument(s) {missing}")
    unknown = sorted(set(arguments) - set(properties))
    if unknown and properties:
        raise MalformedReply(f"{where}: unknown argument(s) {unknown} (arguments: {sorted(properties)})")
    for key, value in arguments.items():
        try:
            jsonschema.validate(value, properties.get(key) or {})
        except jsonschema.ValidationError as exc:
            path = ".".join(str(p) for p in [key, *exc.absolute_path])
            raise MalformedReply(f"{where}: {path}: {exc.message}") from None
        except jsonschema.SchemaError as exc:
            raise TwinError(f"{where}: the tool's own schema is invalid: {exc.message}") from None


def budget_left(budget: Any) -> BudgetLeft:
    """What a `BudgetTracker` (or a bench's `LedgerBudget`) still allows."""
    if budget is None:
        return BudgetLeft()
    limits = getattr(budget, "budget", None) or budget.tracker.budget
    spent = budget.spent

    def left(limit: float | None, used: float) -> float | None:
        return None if limit is None else max(0, limit - used)

    tokens, calls = left(limits.max_tokens, spent.tokens), left(limits.max_calls, spent.calls)
    return BudgetLeft(
        tokens=None if tokens is None else int(tokens),
        usd=left(limits.max_usd, spent.usd),
        calls=None if calls is None else int(calls),
        wall_s=left(limits.max_wall_s, spent.wall_s),
    )


class InboxModel:
    """Writes each request to a folder and waits for the outside program's reply.

    Args:
        folder: the inbox directory (created if missing).
        wait_s: how long to wait for one reply before the run stops (resumable).
        start: the run's position in its conversation history (see `replay.resume_position`).
        trajectory: where the round and step labels come from.
        budget: the run's budget, reported to the program.
        console: where the waiting line is printed.
    """

    def __init__(
        self,
        folder: Path,
        *,
        wait_s: float = 3600.0,
        start: int = 0,
        trajectory: Trajectory | None = None,
        budget: Any = None,
        console: Console | None = None,
    ) -> None:
        if wait_s <= 0:
            raise TwinError("inbox: the wait time must be > 0 seconds")
        self.folder = Path(folder).expanduser().resolve()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.dir = Folder(self.folder)
        except OSError as exc:
            raise TwinError(f"inbox: cannot use {self.folder}: {exc.strerror}") from None
        self.name = f"inbox:{self.folder}"
        self.label = f"outside program via inbox {self.folder}"
        self.wait_s = wait_s
        self.call = start
        self.trajectory = trajectory
        self.budget = budget
        self.console = console or agent_console(stderr=True)
        self._expire_unanswered()
        self.n = 1 + max((int(m.group(1)) for name in self.dir.names() if (m := NUMBERED.match(name))), default=0)

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """Write the request, wait for its reply, check it; see `ground.model.Model.query`."""
        n, self.n = self.n, self.n + 1
        context = self.trajectory.context if self.trajectory is not None else None
        request = InboxRequest(
            n=n,
            call=self.call,
            role=role,
            round=context.round if context else 0,
            step=context.step if context else 0,
            messages=messages,
            tools=tools or [],
            budget_left=budget_left(self.budget),
            reply_to=f"reply-{n}.json",
        )
        started = time.monotonic()
        for attempt in (1, 2):
            request.attempt = attempt
            self._write_request(n, request)
            try:
                reply = _checked_reply(self._wait(n, role, request.round), tools or [], n, messages)
            except MalformedReply as exc:
                self._set_aside(n)
                self._write_error(n, attempt, str(exc), retry=attempt == 1)
                if attempt == 2:
                    self._expire(n)
                    raise ModelStopped(
                        f"inbox: reply-{n}.json was malformed twice ({exc}); fix the program, then resume"
                    ) from None
                self.console.print(f"twin: reply-{n}.json refused ({exc}); see error-{n}.json", soft_wrap=True)
                continue
            reply.latency_s = time.monotonic() - started
            self.console.print(f"twin: read reply-{n}.json after {reply.latency_s:.1f} s", soft_wrap=True)
            self.call += 1
            return reply
        raise AssertionError("unreachable")

    def _write_request(self, n: int, request: InboxRequest) -> None:
        """Write `request-<n>.json`; something else in its place (a directory) stops the run with one line."""
        try:
            self.dir.write(f"request-{n}.json", request.model_dump_json(indent=1))
        except OSError as exc:
            raise ModelStopped(
                f"inbox: cannot write request-{n}.json in {self.folder} ({exc.strerror or exc}); "
                "remove what is in its place, then resume"
            ) from None

    def _set_aside(self, n: int) -> None:
        """Rename a refused reply to `reply-<n>.rejected.json`; where that cannot be done, stop with one line."""
        try:
            self.dir.rename(f"reply-{n}.json", f"reply-{n}.rejected.json")
        except FileNotFoundError:  # the program may have removed it meanwhile
            return
        except OSError as exc:  # e.g. a directory in the way
            self._expire(n)
            raise ModelStopped(
                f"inbox: cannot set the refused reply-{n}.json aside as reply-{n}.rejected.json "
                f"({exc.strerror or exc}); remove both, then resume"
            ) from None

    def _wait(self, n: int, role: str, round: int) -> Any:
        """The parsed `reply-<n>.json`, once it is there and read.

        Raises:
            MalformedReply: the reply is not a regular file, is over `MAX_REPLY_BYTES`, or is not JSON.
            ModelStopped: no reply was there, or read whole, within the wait time (the request expires).
        """
        name = f"reply-{n}.json"
        self.console.print(
            f"twin: waiting for {self.folder / name} ({role}, round {round}; up to {self.wait_s:g} s)", soft_wrap=True
        )
        deadline = time.monotonic() + self.wait_s
        while not self.dir.lexists(name):
            if time.monotonic() >= deadline:
                self._stop_waiting(n)
            time.sleep(POLL_S)
        try:
            return _parse_json(name, self.dir.read(name, MAX_REPLY_BYTES, deadline_s=deadline - time.monotonic()))
        except AgentFileError as exc:
            if time.monotonic() >= deadline:
                self._stop_waiting(n)
            raise MalformedReply(f"{name} cannot be used: {str(exc).split(': ', 1)[-1]}") from None

    def _stop_waiting(self, n: int) -> None:
        self._expire(n)
        raise ModelStopped(f"inbox: no reply-{n}.json within {self.wait_s:g} s; start the program again, then resume")

    def _write_error(self, n: int, attempt: int, error: str, *, retry: bool) -> None:
        record = InboxError(n=n, attempt=attempt, error=error, retry=retry)
        self.dir.write(f"error-{n}.json", record.model_dump_json(indent=1))

    def _expire(self, n: int) -> None:
        if self.dir.lexists(f"request-{n}.json"):
            with contextlib.suppress(OSError):  # something in the way of expired-<n>.json: the request stays
                self.dir.rename(f"request-{n}.json", f"expired-{n}.json")

    def _expire_unanswered(self) -> None:
        """Requests of an earlier process that never got a reply: nobody should answer them now."""
        for name in self.dir.names():
            match = REQUEST.match(name)
            if match and not self.dir.lexists(f"reply-{match.group(1)}.json"):
                self._expire(int(match.group(1)))


def _parse_json(name: str, data: bytes) -> Any:
    try:
        return loads_untrusted(data)
    except UntrustedJSONError as exc:
        raise MalformedReply(f"{name} is {exc}") from None
