"""Tools the roles call, each bound to one boundary and one sandbox.

A role's permissions are the tools it is given and the mounts of the sandboxes
behind them: the Migrator's file tools and `bash` see `/app` read-write, the
Diagnoser's and Verifier's see it read-only, and nobody's sandbox contains the
task's tests or solution. File tools check every path with the `Boundary` first
(refusals land in the audit log); commands run in the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from harness.boundary import Boundary
from harness.sandbox.base import ExecResult, Sandbox

MAX_READ_CHARS = 40_000


class ToolError(Exception):
    """A tool call that cannot be carried out; its message goes back to the model."""


class ToolResult(BaseModel):
    """What a tool returns to the model."""

    text: str = Field(description="Shown to the model as the tool message.")
    ok: bool = Field(default=True, description="False when the call failed or was refused.")
    duration_s: float = Field(default=0.0, description="Wall time of the call.")


@dataclass
class Tool:
    """A callable with an OpenAI function schema."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., ToolResult]
    required: list[str] = field(default_factory=list)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.parameters,
                    "required": self.required or list(self.parameters),
                },
            },
        }

    def __call__(self, **arguments: Any) -> ToolResult:
        return self.function(**arguments)


def format_exec(result: ExecResult) -> str:
    """Render a command's result for the model."""
    parts = [f"exit code {result.returncode}" + (" (timed out)" if result.timed_out else "")]
    if result.stdout:
        parts.append("--- stdout ---\n" + result.stdout)
    if result.stderr:
        parts.append("--- stderr ---\n" + result.stderr)
    if result.truncated:
        parts.append("(output truncated to its head and tail)")
    return "\n".join(parts)


def bash_tool(sandbox: Sandbox, *, name: str, description: str, timeout_s: float) -> Tool:
    """A shell in one sandbox."""

    def run(command: str) -> ToolResult:
        result = sandbox.exec(command, timeout_s=timeout_s)
        return ToolResult(text=format_exec(result), ok=result.ok)

    return Tool(name, description, {"command": {"type": "string"}}, run)


def read_tool(boundary: Boundary) -> Tool:
    """Read a text file (any readable root)."""

    def read(path: str) -> ToolResult:
        host = boundary.check_read(path)
        if host.is_dir():
            entries = sorted(p.name + ("/" if p.is_dir() else "") for p in host.iterdir())
            return ToolResult(text="\n".join(entries) or "(empty directory)")
        if not host.is_file():
            raise ToolError(f"no such file: {path}")
        text = host.read_text(errors="replace")
        if len(text) > MAX_READ_CHARS:
            text = text[:MAX_READ_CHARS] + f"\n… ({len(text) - MAX_READ_CHARS} more characters)"
        return ToolResult(text=text)

    return Tool(
        "read_file",
        "Read a file, or list a directory, e.g. /source/model.py or /app.",
        {"path": {"type": "string"}},
        read,
    )


def write_tools(boundary: Boundary) -> list[Tool]:
    """`write_file` and `edit_file`: only useful under the boundary's writable root."""

    def write(path: str, content: str) -> ToolResult:
        host = boundary.check_write(path)
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_text(content)
        return ToolResult(text=f"wrote {len(content)} characters to {path}")

    def edit(path: str, old: str, new: str) -> ToolResult:
        host = boundary.check_write(path)
        if not host.is_file():
            raise ToolError(f"no such file: {path}")
        text = host.read_text()
        count = text.count(old)
        if count != 1:
            raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once")
        host.write_text(text.replace(old, new))
        return ToolResult(text=f"edited {path}")

    return [
        Tool(
            "write_file",
            "Create or overwrite a file in the candidate repository (/app).",
            {"path": {"type": "string"}, "content": {"type": "string"}},
            write,
        ),
        Tool(
            "edit_file",
            "Replace the one occurrence of `old` by `new` in a file of the candidate (/app).",
            {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            edit,
        ),
    ]


def submit_tool(description: str, parameters: dict[str, Any], accept: Callable[..., Any]) -> Tool:
    """A `submit` tool: `accept(**arguments)` validates and raises `Submitted`, or raises ToolError."""

    def submit(**arguments: Any) -> ToolResult:
        accept(**arguments)
        return ToolResult(text="submitted")

    return Tool("submit", description, parameters, submit)


@dataclass
class Workbench:
    """What one role may use: its boundary and its two sandboxes.

    `candidate` runs with the task's forbidden packages physically absent (the
    candidate side); `reference` runs the original with them present. Both mount
    `/app` read-write only for the Migrator.
    """

    boundary: Boundary
    candidate: Sandbox
    reference: Sandbox
    command_timeout_s: float = 600.0


def workbench_tools(bench: Workbench, *, write: bool) -> dict[str, Tool]:
    """The tools every role has (read, both shells), plus the file-writing tools when `write`."""
    tools = [
        read_tool(bench.boundary),
        bash_tool(
            bench.candidate,
            name="bash",
            description="Run a shell command on the candidate side: /app, /source and /assets are "
            "mounted, torch is absent, there is no network.",
            timeout_s=bench.command_timeout_s,
        ),
        bash_tool(
            bench.reference,
            name="bash_reference",
            description="Run a shell command on the reference side, where the original in /source "
            "runs with torch (e.g. `cd /source && python -c ...`). /app is read-only here.",
            timeout_s=bench.command_timeout_s,
        ),
    ]
    if write:
        tools.extend(write_tools(bench.boundary))
    return {tool.name: tool for tool in tools}
