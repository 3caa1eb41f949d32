"""The one agent loop every role and the base scaffold share.

`run()` loops `step()`, and `step()` is "query the model, execute its tool calls,
feed the results back". Leaving the loop is an exception that carries its reason
(`Submitted`, `StepLimitReached`); a failing command or a refused request is data
returned to the model, never a crash. Budget exhaustion (`BudgetExceeded`) and
infrastructure failures of the model propagate to the caller unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ground.boundary import BoundaryViolation
from ground.errors import BudgetExceeded, InfraFailure
from ground.model import Message, Model, ModelInfraError, ModelReply
from ground.sandbox import SandboxError
from roles.tools import MAX_TOOL_CALLS_PER_REPLY, Tool, ToolError, ToolResult

MAX_ERROR_CHARS = 500


class AgentExit(Exception):
    """Base of the ways out of the agent loop."""


class Submitted(AgentExit):
    """The agent called `submit`; `output` is what it submitted (already validated)."""

    def __init__(self, output: Any) -> None:
        super().__init__("submitted")
        self.output = output


class StepLimitReached(AgentExit):
    """The agent used all its steps without submitting."""


class ShareSpent(AgentExit):
    """twin submits for the agent: it reached its share of the round's budget and did not submit
    at its next reply, or went past its share and margin."""


class ShareGauge(Protocol):
    """A role's share of a round's budget, as the agent loop reads it (`harness.models.budget_plan.ShareWatch`)."""

    def status(self) -> Literal["within", "reached", "over"]:
        """'within' its share, 'reached' it, or 'over' it by more than the margin."""
        ...

    def notice(self) -> str:
        """What the agent is told, once, when it reaches its share."""
        ...


@dataclass
class AgentOutcome:
    """How one agent run ended."""

    exit: str
    """'submitted', 'step_limit' or 'share_spent' (twin submitted for it at its budget share)."""
    output: Any
    """What was submitted (None on step limit or share spent: the role says what stands for it)."""
    steps: int
    messages: list[Message] = field(default_factory=list)


@dataclass(frozen=True)
class ContextPolicy:
    """How much of a role's own earlier tool output each model call carries again.

    The conversation keeps every output whole (the trajectory and the role's result see it
    all); what is sent keeps the recent outputs whole and cuts older long ones to their
    head and tail with a marker. Outputs are cut `keep_whole` at a time, so between N and
    2N−1 recent ones are whole and the prompt's prefix stays the same from one cut to the
    next, where a provider caches it.
    """

    keep_whole: int = 8
    """The last N tool outputs are sent whole (up to 2N−1 between cuts)."""
    old_output_chars: int = 2000
    """An older output longer than this is sent cut to this many characters."""
    max_chars: int = 400_000
    """Past this many characters of messages, older tool outputs are sent as one-line summaries instead."""

    def apply(self, messages: list[Message]) -> list[Message]:
        """The messages to send: `messages` with older long tool outputs cut, and, once the conversation
        passes `max_chars`, older outputs summarized (`summarize`); the list itself is not changed."""
        outputs = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
        n = max(1, self.keep_whole)
        cut_count = max(0, (len(outputs) - n) // n * n)
        sent = list(messages)
        for i in outputs[:cut_count]:
            content = sent[i].get("content")
            if isinstance(content, str) and len(content) > self.old_output_chars:
                sent[i] = {**sent[i], "content": cut_old_output(content, self.old_output_chars)}
        return self.summarize(sent, outputs[:cut_count]) if conversation_chars(sent) > self.max_chars else sent

    def summarize(self, sent: list[Message], older: list[int]) -> list[Message]:
        """`sent` with its oldest tool outputs replaced by one-line summaries, `keep_whole` at a time, until it is
        back under half of `max_chars` (so the next summaries come only after it has grown again, and the
        prompt's prefix stays put in between). The system prompt, the task message, the last outputs and the
        latest output of each evidence tool (`EVIDENCE_TOOLS`) are never summarized. A pure function of the
        conversation: a replay sends the same summaries."""
        latest_evidence = {
            max((i for i in older if sent[i].get("name") == tool), default=-1) for tool in EVIDENCE_TOOLS
        }
        candidates = [i for i in older if i not in latest_evidence]
        n = max(1, self.keep_whole)
        total = conversation_chars(sent)
        for start in range(0, len(candidates), n):
            if total <= self.max_chars // 2:
                break
            for i in candidates[start : start + n]:
                before = len(str(sent[i].get("content") or ""))
                sent[i] = {**sent[i], "content": summary_line(sent[i], self.max_chars)}
                total -= before - len(sent[i]["content"])
        return sent


EVIDENCE_TOOLS = ("write_probe", "run_checks")
"""Tools whose output is the round's evidence: the latest of each stays whole in a long conversation."""
SUMMARY_HEAD_CHARS = 160


def conversation_chars(messages: list[Message]) -> int:
    """Characters of a conversation's text: contents and tool-call arguments."""
    total = 0
    for m in messages:
        total += len(str(m.get("content") or ""))
        total += sum(len(str(call.get("function", {}).get("arguments", ""))) for call in m.get("tool_calls") or [])
    return total


def summary_line(message: Message, max_chars: int) -> str:
    """One line in place of an older tool output: which tool, how long it was, and how it began."""
    content = str(message.get("content") or "")
    head = " ".join(content[:SUMMARY_HEAD_CHARS].split())
    more = "…" if len(content) > SUMMARY_HEAD_CHARS else ""
    return (
        f"[older output of {message.get('name', 'a tool')}, {len(content):,} characters, summarized because "
        f"this conversation passed {max_chars:,} characters; it began: {head}{more} (run it again to see it whole)]"
    )


def cut_old_output(text: str, limit: int) -> str:
    """Head and tail of an older tool output, with a marker saying what was left out and why."""
    half = max(limit // 2, 1)
    left = len(text) - 2 * half
    return (
        f"{text[:half]}\n[... {left} characters of this older tool output are not repeated, to keep the "
        f"conversation short; run the command again to see it whole ...]\n{text[-half:]}"
    )


# What a tool may raise that leaves the agent loop: the run's budget and twin's own
# infrastructure (a sandbox that cannot start, a model provider that fails). Anything
# else a tool raises on agent input is an error shown to the model.
PROPAGATED = (AgentExit, BudgetExceeded, InfraFailure, SandboxError, ModelInfraError)

# Called after every tool call: (role, tool name, arguments, result).
ToolObserver = Callable[[str, str, dict[str, Any], ToolResult], None]
# Called after every model call: (role, step, reply).
StepObserver = Callable[[str, int, ModelReply], None]
# Called before every tool call; raises BudgetExceeded once the run's budget is spent.
BudgetCheck = Callable[[], None]


class Agent:
    """A model with a fixed tool set, driven until it submits or runs out of steps.

    Args:
        model: anything with `query(messages, tools, role=...)`.
        tools: the role's tools by name; tools not in this mapping do not exist for it.
        role: the role name, recorded with every call (e.g. 'migrator').
        max_steps: model calls allowed in one run.
        on_tool: observer of every tool call (trajectory, audit, progress).
        on_step: observer of every model reply (progress).
        context: how much earlier tool output each call carries again (default `ContextPolicy()`).
        budget_check: called before every tool call (the run's budget: wall time, model calls,
            dollars); its `BudgetExceeded` ends the run before the call starts.
    """

    def __init__(
        self,
        model: Model,
        tools: dict[str, Tool],
        *,
        role: str,
        max_steps: int = 50,
        on_tool: ToolObserver | None = None,
        on_step: StepObserver | None = None,
        context: ContextPolicy | None = None,
        budget_check: BudgetCheck | None = None,
    ) -> None:
        self.model = model
        self.budget_check = budget_check
        self.context = context or ContextPolicy()
        self.tools = tools
        self.role = role
        self.max_steps = max_steps
        self.on_tool = on_tool
        self.on_step = on_step
        self.messages: list[Message] = []
        self.steps = 0
        self.share: ShareGauge | None = None
        self.told_at: int | None = None
        """The step after which the agent was told it reached its share (None: not told)."""

    def run(self, system: str, task: str, *, share: ShareGauge | None = None) -> AgentOutcome:
        """Run from a fresh conversation: system prompt, then the task message.

        Args:
            share: the role's share of the round's budget (None: none); see `watch_share`.
        """
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        self.steps = 0
        self.share, self.told_at = share, None
        try:
            while True:
                self.step()
        except Submitted as done:
            return AgentOutcome("submitted", done.output, self.steps, self.messages)
        except StepLimitReached:
            return AgentOutcome("step_limit", None, self.steps, self.messages)
        except ShareSpent:
            return AgentOutcome("share_spent", None, self.steps, self.messages)

    def watch_share(self) -> None:
        """Before a model call: tell the agent once that it reached its share; end it (`ShareSpent`) when it
        replied once since without submitting, or went past its share and margin."""
        if self.share is None:
            return
        status = self.share.status()
        if status == "over" or (self.told_at is not None and self.steps > self.told_at):
            raise ShareSpent()
        if status == "reached" and self.told_at is None:
            self.told_at = self.steps
            last = self.messages[-1]
            if last.get("role") == "user" and isinstance(last.get("content"), str):
                self.messages[-1] = {**last, "content": f"{last['content']}\n\n{self.share.notice()}"}
            else:
                self.messages.append({"role": "user", "content": self.share.notice()})

    def step(self) -> None:
        """One model call and the execution of every tool call it asked for."""
        if self.steps >= self.max_steps:
            raise StepLimitReached()
        self.watch_share()
        self.steps += 1
        schemas = [tool.schema() for tool in self.tools.values()]
        reply = self.model.query(self.context.apply(self.messages), schemas, role=self.role)
        self.messages.append(reply.as_message())
        if self.on_step is not None:
            self.on_step(self.role, self.steps, reply)
        if not reply.tool_calls:
            self.messages.append(
                {
                    "role": "user",
                    "content": "Use the tools to work; call `submit` when you are done.",
                }
            )
            return
        submitted: Submitted | None = None
        for i, call in enumerate(reply.tool_calls):
            if self.budget_check is not None:
                self.budget_check()  # the budget holds per tool call, not only between model calls
            if i >= MAX_TOOL_CALLS_PER_REPLY:
                result, exit_ = self._refuse_over_cap(call.name, len(reply.tool_calls)), None
            elif call.arguments_raw is not None:
                result, exit_ = self._refuse_arguments(call.name, call.arguments_raw), None
            else:
                result, exit_ = self._execute(call.name, call.arguments)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.text})
            submitted = submitted or exit_
        if submitted is not None:
            raise submitted

    def _refuse_over_cap(self, name: str, count: int) -> ToolResult:
        result = ToolResult(
            text=f"error: not run: one reply may carry at most {MAX_TOOL_CALLS_PER_REPLY} tool calls "
            f"(this one carried {count}); send the rest in your next reply",
            ok=False,
        )
        if self.on_tool is not None:
            self.on_tool(self.role, name, {}, result)
        return result

    def _refuse_arguments(self, name: str, raw: str) -> ToolResult:
        result = ToolResult(text=f"error: the arguments of {name} were not a JSON object: {short(raw, 200)}", ok=False)
        if self.on_tool is not None:
            self.on_tool(self.role, name, {"arguments_raw": raw}, result)
        return result

    def _execute(self, name: str, arguments: dict[str, Any]) -> tuple[ToolResult, Submitted | None]:
        started = time.monotonic()
        tool = self.tools.get(name)
        exit_: Submitted | None = None
        if tool is None:
            known = ", ".join(sorted(self.tools))
            result = ToolResult(text=f"error: no tool named {name!r} (tools: {known})", ok=False)
        elif not isinstance(arguments, dict):
            result = ToolResult(text=f"error: the arguments of {name} were not a JSON object", ok=False)
        else:
            try:
                result = tool(**arguments)
            except Submitted as done:
                result, exit_ = ToolResult(text="submitted"), done
            except (ToolError, BoundaryViolation) as exc:
                result = ToolResult(text=f"error: {short(str(exc))}", ok=False)
            except TypeError as exc:
                result = ToolResult(text=f"error: bad arguments for {name}: {short(str(exc))}", ok=False)
            except PROPAGATED:
                raise
            except Exception as exc:  # any other failure on agent input is the tool's error, not the run's
                reason = short(str(exc).splitlines()[0] if str(exc) else "")
                result = ToolResult(text=f"error: {name} failed: {type(exc).__name__}: {reason}", ok=False)
        result.duration_s = time.monotonic() - started
        if self.on_tool is not None:
            self.on_tool(self.role, name, arguments, result)
        return result, exit_


def short(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """An error reason cut to `limit` characters, in text UTF-8 can hold."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "…"


def dumps_arguments(arguments: dict[str, Any]) -> str:
    """Stable JSON of tool arguments (for logs)."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
