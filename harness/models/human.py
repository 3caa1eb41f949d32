"""`--model human`: a person answers each model call at the terminal.

Each request shows the role, the round, what is new since the person's last answer
(a system prompt the first time it appears, the task, then what the tools
returned) and the tools on offer. The person answers in the compact syntax of
`harness.models.human_syntax` (`bash: ls /app`, `write_file /app/x.py <<EOF`, `submit: done`,
`> plain text`) or with a command: `:prompt` (the whole conversation), `:evidence`
(the run's evidence summary), `:tools` (the tool schemas), `:help`, `:quit`.
Quitting (or Ctrl-D) stops the run cleanly; `twin migrate --resume` continues it.

Output is drawn with rich and input read with prompt_toolkit (history, line
editing); nothing here handles the terminal by hand.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text as RichText

from evidence_store.store import EvidenceStore
from ground.errors import TwinError
from ground.model import Message, ModelReply, ModelStopped, ToolCall, ToolSchema
from ground.terminal import agent_console, styled
from ground.trajectory import Trajectory
from harness.models import human_syntax
from harness.models.human_syntax import COMMANDS, AnswerError, Call, Command, Text, is_complete, parse_answer, usage

Ask = Callable[[str], str]
"""Reads one line after showing a prompt; raises EOFError when input ends."""

HELP = human_syntax.__doc__ or ""
SHOWN_CHARS = 6000
"""A message longer than this is shown with its middle cut (`:prompt` shows it whole)."""


class HumanModel:
    """A person at the terminal answers every model call.

    Args:
        trajectory: where the round and step labels come from.
        evidence_path: the run's evidence store, for `:evidence`.
        console: where requests are shown (default: the terminal).
        ask: reads one input line (default: a prompt_toolkit session).
    """

    def __init__(
        self,
        *,
        trajectory: Trajectory | None = None,
        evidence_path: Path | None = None,
        console: Console | None = None,
        ask: Ask | None = None,
    ) -> None:
        self.name = "human"
        self.label = "a person at the terminal"
        self.trajectory = trajectory
        self.evidence_path = evidence_path
        self.console = console or agent_console()
        self._ask = ask
        self._seen_systems: set[str] = set()
        self._conversation: str | None = None
        self._shown = 0
        self._answers = 0

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """Show what is new, then read answers until one is a tool call or text."""
        tools = tools or []
        self._show_request(messages, tools, role)
        while True:
            text = self._read()
            try:
                answer = parse_answer(text, tools)
            except AnswerError as exc:
                self.console.print(styled(exc, "red"))
                continue
            if isinstance(answer, Command):
                self._command(answer.name, messages, tools)
                continue
            self._answers += 1
            if isinstance(answer, Call):
                call = ToolCall(id=f"human_{self._answers}", name=answer.name, arguments=answer.arguments)
                return ModelReply(tool_calls=[call])
            assert isinstance(answer, Text)
            return ModelReply(content=answer.text)

    # ---- showing ---------------------------------------------------------------------------------
    def _show_request(self, messages: list[Message], tools: list[ToolSchema], role: str) -> None:
        context = self.trajectory.context if self.trajectory is not None else None
        where = f"round {context.round} · step {context.step + 1}" if context else ""
        self.console.print(Rule(RichText.assemble(styled(role, "bold"), f" · {where}"), style="cyan"))
        conversation = _fingerprint(messages[:2])
        if conversation != self._conversation:
            self._conversation, self._shown = conversation, 0
        for message in messages[self._shown :]:
            self._show_message(message)
        self._shown = len(messages)
        names = " · ".join(usage(t.get("function") or {}) for t in tools)
        self.console.print(styled(f"tools: {names}", "dim"))
        answer = "answer: NAME: TEXT · NAME ARG... [<<EOF] · > text · :help :prompt :evidence :quit"
        self.console.print(styled(answer, "dim"))

    def _show_message(self, message: Message, *, whole: bool = False) -> None:
        role = message.get("role")
        content = message.get("content") or ""
        if role == "system":
            digest = hashlib.sha256(content.encode()).hexdigest()
            if digest in self._seen_systems and not whole:
                self.console.print(styled("(the same system prompt as before; :prompt shows it)", "dim"))
                return
            self._seen_systems.add(digest)
        if role == "assistant" and not whole:
            return  # the person's own answer
        if role == "assistant":
            calls = [f"{c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls") or []]
            content = "\n".join([content, *calls]).strip()
        title = {"tool": f"result of {message.get('name', 'tool')}"}.get(role, role)
        shown = content if whole or len(content) <= SHOWN_CHARS else _cut(content)
        self.console.print(Panel(styled(shown), title=styled(title), title_align="left", expand=True))

    def _command(self, name: str, messages: list[Message], tools: list[ToolSchema]) -> None:
        if name == "quit":
            raise ModelStopped("the person at the terminal quit")
        if name == "help":
            self.console.print(RichText(HELP))
        elif name == "prompt":
            for message in messages:
                self._show_message(message, whole=True)
        elif name == "tools":
            self.console.print(styled(json.dumps(tools, indent=1)))
        elif name == "evidence":
            self.console.print(Panel(styled(self._evidence()), title="evidence", title_align="left"))

    def _evidence(self) -> str:
        if self.evidence_path is None or not self.evidence_path.exists():
            return "no evidence recorded yet"
        store = EvidenceStore(self.evidence_path, create=False)
        try:
            return store.render_for_prompt(max_chars=SHOWN_CHARS) or "no evidence recorded yet"
        finally:
            store.close()

    # ---- reading ---------------------------------------------------------------------------------
    def _read(self) -> str:
        ask = self._ask or self._prompt_toolkit()
        try:
            lines = [ask("you> ")]
            while not is_complete("\n".join(lines)):
                lines.append(ask("...  "))
        except EOFError:
            raise ModelStopped("the person at the terminal ended the input") from None
        return "\n".join(lines)

    def _prompt_toolkit(self) -> Ask:
        if not sys.stdin.isatty():
            raise TwinError("--model human needs a terminal on standard input (use inbox:DIR for programs)")
        from prompt_toolkit import PromptSession

        session: PromptSession[str] = PromptSession()
        self._ask = session.prompt
        return self._ask


def _fingerprint(messages: list[Message]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()


def _cut(text: str) -> str:
    half = SHOWN_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters; :prompt shows all ...]\n{text[-half:]}"


__all__ = ["HumanModel", "COMMANDS"]
