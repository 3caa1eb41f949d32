"""Tools the roles call, each bound to one boundary and one sandbox.

A role's permissions are the tools it is given and the mounts of the sandboxes
behind them: the Migrator's file tools and `bash` see `/app` read-write, the
Diagnoser's and Verifier's see it read-only, and nobody's sandbox contains the
task's tests or solution. File tools check every path with the `Boundary` first
(refusals land in the audit log); commands run in the sandbox.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from ground.boundary import Boundary
from ground.sandbox import ExecResult, Sandbox
from ground.untrusted_io import AgentFileError, overwrite_regular, read_regular

MAX_READ_CHARS = 40_000
MAX_READ_BYTES = 4 * MAX_READ_CHARS
MAX_EDIT_BYTES = 4 << 20
MAX_LIST_ENTRIES = 2_000
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_COMMAND_BYTES = 100_000


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
    required: list[str] | None = None
    """The parameters a call must give (None: all of them)."""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.parameters,
                    "required": list(self.parameters) if self.required is None else self.required,
                },
            },
        }

    def __call__(self, **arguments: Any) -> ToolResult:
        return self.function(**arguments)


def format_exec(result: ExecResult, limit_note: str = "") -> str:
    """Render a command's result for the model; a time-out says the limit it hit (`limit_note`: which
    limit that was) and, where measured, how much CPU time its processes had in that wall time."""
    head = f"exit code {result.returncode}"
    if result.timed_out:
        head += timeout_text(result, limit_note)
    parts = [head]
    if result.stdout:
        parts.append("--- stdout ---\n" + result.stdout)
    if result.stderr:
        parts.append("--- stderr ---\n" + result.stderr)
    if result.truncated:
        parts.append("(output truncated to its head and tail)")
    return "\n".join(parts)


def timeout_text(result: ExecResult, limit_note: str = "") -> str:
    """` (timed out: ...)`: the limit the command hit and, where measured, its CPU time against its wall time."""
    limit = result.limit_s if result.limit_s is not None else result.duration_s
    text = f" (timed out: stopped at its time limit of {limit:.1f} s{limit_note}"
    if result.cpu_s is not None:
        text += f"; its processes had {result.cpu_s:.1f} s of CPU time in {result.duration_s:.1f} s of wall time"
        if result.cpu_s < 0.5 * result.duration_s:
            text += ": the machine is loaded, so allow for slower runs"
    return text + ")"


TimeLeft = Callable[[], "float | None"]
"""Seconds left of the run's wall budget (None: no wall limit)."""


def command_limit(own_s: float, time_left: TimeLeft | None) -> tuple[float, str]:
    """The limit of the next command: its own, or what is left of the run's wall budget where that is
    less; with a note saying which one it is."""
    left = time_left() if time_left is not None else None
    if left is not None and left < own_s:
        return max(left, 0.0), ", what was left of the run's wall budget"
    return own_s, ", the command limit"


def bash_tool(
    sandbox: Sandbox, *, name: str, description: str, timeout_s: float, time_left: TimeLeft | None = None
) -> Tool:
    """A shell in one sandbox; its description states its time limit, and each command runs under the
    smaller of that limit and what is left of the run's wall budget (`time_left`)."""

    def run(command: str) -> ToolResult:
        command = check_text_argument("command", command)
        if "\0" in command:
            raise ToolError("command contains a NUL byte")
        if len(command.encode("utf-8")) > MAX_COMMAND_BYTES:
            raise ToolError(f"command is longer than {MAX_COMMAND_BYTES} bytes; write a script with a file first")
        limit, note = command_limit(timeout_s, time_left)
        result = sandbox.exec(command, timeout_s=limit)
        return ToolResult(text=format_exec(result, note), ok=result.ok)

    return Tool(name, description + limit_sentence(timeout_s, time_left), {"command": {"type": "string"}}, run)


def limit_sentence(timeout_s: float, time_left: TimeLeft | None) -> str:
    """What a command tool's description says of its time limit (fixed text: the description is sent with
    every call, so it names no figure that changes while the run goes on)."""
    text = f" Each command is stopped after {timeout_s:g} s"
    if time_left is not None and time_left() is not None:
        text += " or when the run's wall budget runs out, whichever comes first"
    return text + " (exit code 124, and the output says which limit it hit)."


def check_path_argument(path: Any) -> str:
    """Refuse a path argument no file system can name, before the boundary or the OS sees it.

    Raises:
        ToolError: not a string, empty, a NUL byte, text UTF-8 cannot encode (lone
            surrogates), a component over 255 bytes or a path over 4,096 bytes.
    """
    if not isinstance(path, str):
        raise ToolError(f"path must be a string, not {type(path).__name__}")
    if not path:
        raise ToolError("path is empty")
    if "\0" in path:
        raise ToolError("path contains a NUL byte")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("path is not valid Unicode text (lone surrogate)") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise ToolError(f"path is longer than {MAX_PATH_BYTES} bytes")
    if any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise ToolError(f"a path component is longer than {MAX_NAME_BYTES} bytes")
    return path


def check_text_argument(name: str, value: Any) -> str:
    """Refuse a text argument that cannot be written as UTF-8."""
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"{name} is not valid Unicode text (lone surrogate at character {exc.start})") from None
    return value


def shown_name(name: str) -> str:
    """A file name as the model can read it: bytes that are not UTF-8 appear as U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _list_directory(host: Path) -> str:
    entries: list[str] = []
    with os.scandir(host) as it:
        for entry in it:
            if len(entries) >= MAX_LIST_ENTRIES:
                return "\n".join(sorted(entries)) + f"\n… (listing stopped after {MAX_LIST_ENTRIES} entries)"
            entries.append(shown_name(entry.name) + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    return "\n".join(sorted(entries)) or "(empty directory)"


def read_tool(boundary: Boundary) -> Tool:
    """Read a text file (any readable root): regular files only, at most MAX_READ_BYTES read."""

    def read(path: str) -> ToolResult:
        host = boundary.check_read(check_path_argument(path))
        try:
            st = os.lstat(host)
        except OSError as exc:
            raise ToolError(f"cannot read {path}: {exc.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            return ToolResult(text=_list_directory(host))
        try:
            data, size = read_regular(host, MAX_READ_BYTES)
        except AgentFileError as exc:
            raise ToolError(f"cannot read {path}: {str(exc).split(': ', 1)[-1]}") from None
        text = data.decode("utf-8", errors="replace")
        if len(text) > MAX_READ_CHARS or size > len(data):
            more = max(size - len(text[:MAX_READ_CHARS].encode()), 0)
            text = text[:MAX_READ_CHARS] + f"\n… (cut: {more} more bytes of {size})"
        return ToolResult(text=text)

    return Tool(
        "read_file",
        "Read a file, or list a directory, e.g. /source/model.py or /app.",
        {"path": {"type": "string"}},
        read,
    )


def write_tools(boundary: Boundary) -> list[Tool]:
    """`write_file` and `edit_file`: only useful under the boundary's writable root."""

    def target(path: str) -> Path:
        host = boundary.check_write(check_path_argument(path))
        if host.is_dir() and not host.is_symlink():
            raise ToolError(f"{path} is a directory, not a file")
        return host

    def write(path: str, content: str) -> ToolResult:
        host = target(path)
        data = check_text_argument("content", content).encode("utf-8")
        try:
            host.parent.mkdir(parents=True, exist_ok=True)
            overwrite_regular(host, data)
        except OSError as exc:
            raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None
        return ToolResult(text=f"wrote {len(content)} characters to {path}")

    def edit(path: str, old: str, new: str) -> ToolResult:
        host = target(path)
        old, new = check_text_argument("old", old), check_text_argument("new", new)
        try:
            data, size = read_regular(host, MAX_EDIT_BYTES)
        except AgentFileError as exc:
            raise ToolError(f"cannot edit {path}: {str(exc).split(': ', 1)[-1]}") from None
        if size > MAX_EDIT_BYTES:
            raise ToolError(f"{path} is {size} bytes, over the {MAX_EDIT_BYTES}-byte edit limit; use bash")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not UTF-8 text; edit it with bash") from None
        count = text.count(old) if old else 0
        if count != 1:
            raise ToolError(f"`old` occurs {count} times in {path}; it must occur exactly once")
        try:
            overwrite_regular(host, text.replace(old, new).encode("utf-8"))
        except OSError as exc:
            raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None
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


class RoundHistory(Protocol):
    """The candidate's committed rounds, as the `diff` tool reads them (`harness.run.candidate_repo.CandidateRepo`)."""

    def rounds(self) -> list[int]:
        """Round numbers that have a snapshot, ascending."""
        ...

    def diff(self, a: int, b: int) -> str:
        """The changes from round a to round b: a stat, then the patch."""
        ...


def diff_tool(repo: RoundHistory) -> Tool:
    """Read-only view of what a round changed in the candidate (round N against round N-1)."""

    def diff(round: Any = None) -> ToolResult:
        rounds = repo.rounds()
        if round is None or round == "":
            round = rounds[-1] if rounds else 0
        try:
            round = int(round)
        except (TypeError, ValueError):
            raise ToolError(f"round must be a round number, one of {rounds}") from None
        if round not in rounds or round == 0:
            raise ToolError(f"round {round} has no snapshot to compare; committed rounds: {rounds[1:] or 'none yet'}")
        return ToolResult(text=repo.diff(round - 1, round))

    return Tool(
        "diff",
        "Show what a committed round changed in the candidate (round N against round N-1): a stat "
        "and the patch. Without `round`, the latest committed round.",
        {"round": {"type": "integer"}},
        diff,
        required=[],
    )


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
    time_left: TimeLeft | None = None
    """Seconds left of the run's wall budget, asked before each command (None: no budget to watch)."""
    repo: RoundHistory | None = None
    """The round history, for the read-only `diff` tool (None: no history to show)."""
    scratch: str | None = None
    """Where the role's scratch directory lies in both sandboxes (writable on the reference side
    only, non-executable on the candidate side), or None: the role has none."""


SCRATCH = "/scratch"
"""Where a read-only role's scratch directory is mounted."""

MAX_TOOL_CALLS_PER_REPLY = 8
"""Tool calls one reply may carry; `roles.agent.Agent` answers later ones "not run" (the prompts and the
shell tools' descriptions say so). With the budget checked before each call, one reply never holds a run
for more than this many commands."""
CALLS_NOTE = f" At most {MAX_TOOL_CALLS_PER_REPLY} tool calls per reply: later ones are not run."


def workbench_tools(bench: Workbench, *, write: bool) -> dict[str, Tool]:
    """The tools every role has (read, both shells), plus the file-writing tools when `write`."""
    scratch_note = ""
    reference_note = (
        ": nothing written on this side outlives it (a role that writes the candidate gets no scratch "
        "directory, so files of the original cannot be carried into it), so print what you need."
    )
    if bench.scratch:
        scratch_note = (
            f" {bench.scratch} holds what your bash_reference commands saved there, as data (read-only "
            "here): native code cannot be loaded on this side, from there or from a copy, nor from /tmp."
        )
        reference_note = (
            f"; {bench.scratch} is yours for the whole run (every round; never evidence, only probes are), and "
            f"your `bash` commands read it as data: save arrays there (numpy.save('{bench.scratch}/x.npy', ...)) "
            "rather than print them (shared objects there do not load on the candidate side)."
        )
    tools = [
        read_tool(bench.boundary),
        bash_tool(
            bench.candidate,
            name="bash",
            description="Run a shell command on the candidate side: /app, /source and /assets are "
            "mounted, torch is absent, there is no network. /tmp is fresh for every command: nothing "
            "written there outlives it." + scratch_note + CALLS_NOTE,
            timeout_s=bench.command_timeout_s,
            time_left=bench.time_left,
        ),
        bash_tool(
            bench.reference,
            name="bash_reference",
            description="Run a shell command on the reference side, where the original in /source "
            "runs with torch (e.g. `cd /source && python -c ...`). /app is read-only here, and /tmp is "
            "fresh for every command" + reference_note + CALLS_NOTE,
            timeout_s=bench.command_timeout_s,
            time_left=bench.time_left,
        ),
    ]
    if bench.repo is not None:
        tools.append(diff_tool(bench.repo))
    if write:
        tools.extend(write_tools(bench.boundary))
    return {tool.name: tool for tool in tools}
