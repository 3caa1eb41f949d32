"""The compact answer syntax of `--model human`: a pure `str -> Answer` parser.

    :help  :prompt  :evidence  :tools  :quit      commands (shown, never sent to the model)
    bash: ls /app                                 NAME: TEXT, TEXT is the tool's first parameter
    submit: {"diagnosis": {...}}                  NAME: JSON object, all the arguments at once
    edit_file /app/x.py "k + 1" k                 NAME WORD..., shell-quoted words fill the
    write_file /app/x.py <<EOF                    parameters in order (key=value names one); each
    ...lines...                                   <<TAG takes the lines up to a line TAG, like a
    EOF                                           shell here-document (trailing newline kept)
    run_checks                                    a tool without arguments
    > any text                                    plain text (so is any line not starting with a tool)

Values are converted to the parameter's type (integer, number, boolean; objects and
arrays as JSON). A line that starts like a tool call (`word:`) naming no tool of
this role is refused rather than sent as text, so a typo never reaches the model.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ground.model import ToolSchema
from ground.untrusted_json import UntrustedJSONError, loads_untrusted

COMMANDS = ("help", "prompt", "evidence", "tools", "quit")
HEREDOC = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*)=)?<<-?['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?$")
KEY_VALUE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
HEAD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:(:)\s*|\s+|$)")


class AnswerError(ValueError):
    """An answer that cannot be understood; the message says how to fix it."""


@dataclass(frozen=True)
class Command:
    """A command to the terminal model itself (`:prompt`, `:quit`, ...)."""

    name: str


@dataclass(frozen=True)
class Call:
    """One tool call."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Text:
    """Plain assistant text."""

    text: str


Answer = Command | Call | Text


def heredoc_tags(first_line: str) -> list[str]:
    """The here-document tags the first line opens (their bodies follow on later lines)."""
    try:
        words = shlex.split(first_line, posix=False)
    except ValueError:
        return []
    return [m.group(2) for w in words if (m := HEREDOC.match(w))]


def is_complete(text: str) -> bool:
    """Whether every here-document the first line opens is closed by its tag line."""
    first, *rest = text.split("\n")
    for tag in heredoc_tags(first):
        if tag not in rest:
            return False
        rest = rest[rest.index(tag) + 1 :]
    return True


def parse_answer(text: str, tools: list[ToolSchema]) -> Answer:
    """Turn what a person typed into a command, a tool call or plain text.

    Args:
        text: the whole answer; here-document bodies on the lines after the first.
        tools: the tool schemas the request offers.

    Raises:
        AnswerError: unknown command or tool, bad JSON, missing, unknown or surplus
            arguments, an unclosed here-document, or nothing typed.
    """
    if not text.strip():
        raise AnswerError("nothing typed: answer with a tool call, text, or :help")
    first, _, body = text.partition("\n")
    stripped = first.strip()
    if stripped.startswith(":"):
        name = stripped[1:].split()[0] if stripped[1:].split() else ""
        if name not in COMMANDS:
            raise AnswerError(f"unknown command :{name} (commands: {', '.join(':' + c for c in COMMANDS)})")
        return Command(name)
    if stripped.startswith(">"):
        return Text(text.strip()[1:].strip())
    schemas = {(t.get("function") or {}).get("name"): (t.get("function") or {}) for t in tools}
    head = HEAD.match(stripped)
    if head is None or head.group(1) not in schemas:
        if head is not None and head.group(2) == ":":
            raise AnswerError(
                f"no tool named {head.group(1)!r} here (tools: {', '.join(schemas)}); start text with '>'"
            )
        return Text(text.strip())
    name, colon = head.group(1), head.group(2)
    parameters = schemas[name].get("parameters") or {}
    rest = stripped[head.end() :]
    if colon:
        arguments = _rest_of_line(rest + ("\n" + body if body else ""), parameters, name)
    else:
        arguments = _words(rest, body, parameters, name)
    missing = [p for p in parameters.get("required") or [] if p not in arguments]
    if missing:
        raise AnswerError(f"{name}: missing {', '.join(missing)} (usage: {usage(schemas[name])})")
    return Call(name, arguments)


def usage(function: dict[str, Any]) -> str:
    """`name param1 param2 ...` of one tool, for hints."""
    properties = (function.get("parameters") or {}).get("properties") or {}
    return " ".join([function.get("name", "?"), *properties])


def _rest_of_line(rest: str, parameters: dict[str, Any], name: str) -> dict[str, Any]:
    properties = parameters.get("properties") or {}
    if not properties:
        raise AnswerError(f"{name} takes no arguments: type just `{name}`")
    first = next(iter(properties))
    if rest.lstrip().startswith("{"):
        try:
            whole = loads_untrusted(rest)
        except UntrustedJSONError as exc:
            raise AnswerError(f"{name}: not a JSON object ({exc})") from None
        if isinstance(whole, dict) and whole and set(whole) <= set(properties):
            return {key: value for key, value in whole.items()}
    return {first: _convert(rest.strip(), properties[first], name, first)}


def _words(rest: str, body: str, parameters: dict[str, Any], name: str) -> dict[str, Any]:
    properties = parameters.get("properties") or {}
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise AnswerError(f"{name}: {exc} (quote with \"...\" or '...')") from None
    bodies = _heredoc_bodies(rest, body, name)
    arguments: dict[str, Any] = {}
    positional = iter(properties)
    for word in words:
        heredoc = HEREDOC.match(word)
        key_value = KEY_VALUE.match(word)
        if heredoc:
            key, value = heredoc.group(1), bodies.pop(0)
        elif key_value and key_value.group(1) in properties:
            key, value = key_value.group(1), key_value.group(2)
        else:
            key, value = None, word
        if key is None:
            key = next((p for p in positional if p not in arguments), None)
            if key is None:
                raise AnswerError(
                    f"{name}: too many arguments (usage: {name} {' '.join(properties)}; "
                    f"`{name}: TEXT` passes a whole line; start text with '>')"
                )
        if key not in properties:
            raise AnswerError(f"{name}: no argument {key!r} (arguments: {', '.join(properties)})")
        if key in arguments:
            raise AnswerError(f"{name}: {key} given twice")
        arguments[key] = _convert(value, properties[key], name, key)
    return arguments


def _heredoc_bodies(rest: str, body: str, name: str) -> list[str]:
    lines = body.split("\n") if body else []
    bodies = []
    for tag in heredoc_tags(rest):
        if tag not in lines:
            raise AnswerError(f"{name}: the here-document <<{tag} is not closed by a line {tag}")
        end = lines.index(tag)
        bodies.append("".join(line + "\n" for line in lines[:end]))
        lines = lines[end + 1 :]
    if any(line.strip() for line in lines):
        raise AnswerError(f"{name}: text after the last here-document; one tool call per answer")
    return bodies


def _convert(value: str, schema: dict[str, Any], name: str, key: str) -> Any:
    kind = schema.get("type")
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
        if kind == "boolean":
            lowered = value.strip().lower()
            if lowered not in ("true", "false", "yes", "no", "1", "0"):
                raise ValueError(value)
            return lowered in ("true", "yes", "1")
        if kind in ("object", "array") or (kind is None and ("$defs" in schema or "properties" in schema)):
            return loads_untrusted(value)
    except ValueError:  # UntrustedJSONError included
        wanted = {"object": "a JSON object", "array": "a JSON array"}.get(kind or "", kind or "JSON")
        raise AnswerError(f"{name}: {key} must be {wanted}, got {value[:60]!r}") from None
    return value
