"""`replay:PATH`: answer with the assistant turns of a recorded trajectory.

A replayed run gets the recorded `model_call` replies in order, and each request
is checked against the recorded one first: the same role, the same tool names,
the same number and roles of messages, identical system and user text, and the
same tool-call ids in assistant and tool messages. Tool results are not compared
(they hold timings). System and user text are compared on their canonical form
(`evidence_store.numbers.canonical`): prompts render every measurement in one
format at the precision it carries and never cut inside one, and the canonical
form masks the measurements, whose digits (a noise floor, a score's last digit)
differ between machines; everything else must be identical.
The first difference raises `ReplayDivergence` naming the call index, the role
and the message index; so does asking for more calls than were recorded.
Replies come back with their recorded token counts and cost 0.

A recording of a resumed run also holds the calls of the step that was cut off
(the resumed run did that step again from its start); those calls are left out,
so that replaying such a recording follows the run that finished.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from evidence_store.numbers import canonical
from ground.errors import TwinError
from ground.model import Message, ModelReply, ReplayDivergence, ToolSchema
from ground.trajectory import ModelCallRecord, Trajectory

SNIPPET_CHARS = 60


class ReplayModel:
    """Replays the model calls recorded in a `trajectory.jsonl`.

    Args:
        path: the recorded trajectory (a file, or a run directory holding one).
        start: index of the first recorded call to replay (a resumed run continues
            where it stopped; earlier calls are already in its history).

    Raises:
        TwinError: the file is missing, unreadable or holds no model calls, or `start`
            lies outside the recording.
    """

    def __init__(self, path: Path, *, start: int = 0) -> None:
        path = Path(path)
        if path.is_dir():
            path = path / "trajectory.jsonl"
        if not path.is_file():
            raise TwinError(f"replay: no trajectory at {path}")
        self.path = path
        self.name = f"replay:{path}"
        self.label = f"replayed from {path}"
        self.calls: list[ModelCallRecord] = kept_calls(Trajectory(path).model_calls())
        if not self.calls:
            raise TwinError(f"replay: {path} records no model calls")
        if not 0 <= start <= len(self.calls):
            raise TwinError(f"replay: cannot start at call {start}; {path} records {len(self.calls)} calls")
        self._next = start
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Recorded calls not replayed yet."""
        return len(self.calls) - self._next

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """The next recorded reply, if the request matches the recorded one."""
        with self._lock:
            index = self._next
            if index >= len(self.calls):
                raise ReplayDivergence(
                    f"replay diverged at call {index} (role {role}): the recording "
                    f"{self.path} ends after {len(self.calls)} model calls"
                )
            recorded = self.calls[index]
            problem = request_difference(recorded, messages, tools, role)
            if problem is not None:
                raise ReplayDivergence(f"replay diverged at call {index} (role {role}), {problem}")
            self._next += 1
        return recorded.reply.model_copy(update={"cost_usd": 0.0, "cached": False})


def kept_calls(calls: list[ModelCallRecord]) -> list[ModelCallRecord]:
    """`calls` without those of a role's turn that a resumed run started again.

    Within one turn (same round and role) every request extends the previous one. A
    request of the same round and role that is no longer than the previous one and
    opens with the turn's first two messages is the turn starting over after a
    resume; the cut-off attempt before it is dropped.
    """
    kept: list[ModelCallRecord] = []
    turn: list[ModelCallRecord] = []
    for call in calls:
        if turn and (call.round, call.role) == (turn[-1].round, turn[-1].role):
            messages, last = call.request.messages, turn[-1].request.messages
            if len(messages) <= len(last) and messages[:2] == turn[0].request.messages[:2]:
                turn = []  # the earlier attempt at this turn was cut off
        else:
            kept += turn
            turn = []
        turn.append(call)
    return kept + turn


ROLE_STEP = {"diagnoser": "diagnose", "migrator": "migrate", "verifier": "verify", "agent": "migrate"}
"""The run step (`RoundState.done`) in which each role's turn happens."""


def resume_position(calls: list[ModelCallRecord], done: dict[int, list[str]]) -> int:
    """Where a resumed run stands in its conversation history: its kept calls of finished steps.

    Args:
        calls: the run's recorded model calls, in order.
        done: round -> the steps finished in it (from the run state).

    A resumed run does its first unfinished step again from the start, so the calls of
    a cut-off turn at the end of the recording do not count.
    """
    kept = kept_calls(calls)
    if not kept:
        return 0
    last = kept[-1]
    if ROLE_STEP.get(last.role, "migrate") in done.get(last.round, []):
        return len(kept)
    tail = 0
    while tail < len(kept) and (kept[-1 - tail].round, kept[-1 - tail].role) == (last.round, last.role):
        tail += 1
    return len(kept) - tail


def request_difference(
    recorded: ModelCallRecord, messages: list[Message], tools: list[ToolSchema] | None, role: str
) -> str | None:
    """Where a request differs from a recorded one, in words; None when it matches."""
    if role != recorded.role:
        return f"role: expected {recorded.role!r}, got {role!r}"
    want_tools, got_tools = _tool_names(recorded.request.tools), _tool_names(tools)
    if want_tools != got_tools:
        return f"tools: expected {want_tools}, got {got_tools}"
    expected = recorded.request.messages
    for number, (want, got) in enumerate(zip(expected, messages, strict=False)):
        problem = _message_difference(want, got)
        if problem is not None:
            return f"message {number} ({want.get('role')}): {problem}"
    if len(expected) != len(messages):
        return f"expected {len(expected)} messages, got {len(messages)}"
    return None


def _tool_names(tools: list[ToolSchema] | None) -> list[str]:
    return [str((t.get("function") or {}).get("name", t.get("name", ""))) for t in tools or []]


def _message_difference(want: Message, got: Message) -> str | None:
    if want.get("role") != got.get("role"):
        return f"role: expected {want.get('role')!r}, got {got.get('role')!r}"
    role = want.get("role")
    if role in ("system", "user"):
        return _text_difference(want.get("content"), got.get("content"))
    if role == "tool" and want.get("tool_call_id") != got.get("tool_call_id"):
        return f"tool_call_id: expected {want.get('tool_call_id')!r}, got {got.get('tool_call_id')!r}"
    if role == "assistant":
        want_ids = [c.get("id") for c in want.get("tool_calls") or []]
        got_ids = [c.get("id") for c in got.get("tool_calls") or []]
        if want_ids != got_ids:
            return f"tool call ids: expected {want_ids}, got {got_ids}"
    return None


def _text_difference(want: Any, got: Any) -> str | None:
    if want == got:
        return None
    if not (isinstance(want, str) and isinstance(got, str)):
        return f"content: expected {_clip(repr(want))}, got {_clip(repr(got))}"
    want, got = canonical(want), canonical(got)
    if want == got:
        return None
    at = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if at is None:
        at = min(len(want), len(got))
    start = max(0, at - SNIPPET_CHARS // 2)
    end = at + SNIPPET_CHARS // 2
    return f"text differs at character {at}: expected {want[start:end]!r}, got {got[start:end]!r}"


def _clip(text: str) -> str:
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"
