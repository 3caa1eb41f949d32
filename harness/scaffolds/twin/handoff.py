"""The Diagnoser's reading, handed to the Migrator: the spans of the original a diagnosis cites.

The Diagnoser cites what the Migrator will need in each gap's `sources` (and may cite file:line in
its `evidence`): `path:12-40` (lines 12 to 40), `path:12` (line 12 with the lines around it) or
`path:Name` (a Python definition, `Class.method` too). Their text, read from the original and
numbered, goes into the Migrator's task message, up to a stated size (`handoff_chars`), so that the
Migrator, a fresh conversation, need not read again what the Diagnoser read. The paths are the
Diagnoser's text: each is resolved inside the original and read without following a link, size-capped.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ground.untrusted_io import AgentFileError, read_regular_text
from roles.schemas import Diagnosis

# a path of printable characters; line numbers of at most 9 digits (int() of a longer one is refused, or slow)
LINES = re.compile(r"^(?P<path>[^\s:\x00-\x1f\x7f]+):(?P<first>\d{1,9})(?:\s*-\s*(?P<last>\d{1,9}))?$")
DEFINITION = re.compile(r"^(?P<path>[^\s:\x00-\x1f\x7f]+\.py):(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")
AROUND = (5, 15)
"""A single cited line comes with this many lines before and after it."""
MAX_SPAN_LINES = 400
MAX_FILE_BYTES = 2 << 20
MAX_ENTRIES = 40
"""Entries read at most: the rest are named, not read (each entry reads and may parse a file)."""


def cited(diagnosis: Diagnosis) -> list[str]:
    """Every span the diagnosis cites (its gaps' `sources`, then file:line entries of their `evidence`), once each."""
    entries = [e.strip() for gap in diagnosis.gaps for e in (*gap.sources, *gap.evidence)]
    return list(dict.fromkeys(e for e in entries if LINES.match(e) or DEFINITION.match(e)))


def handoff_text(diagnosis: Diagnosis, source_dir: Path, mount: str, limit: int) -> str:
    """The cited spans' text, numbered, within `limit` characters; what did not fit or could not be read is
    named at the end, so the Migrator knows what it still has to read itself."""
    shown, left_out, used = [], [], 0
    entries = cited(diagnosis)
    for entry in entries[:MAX_ENTRIES]:
        if used >= limit:
            left_out.append(f"{entry} (over the {limit:,}-character size of this section)")
            continue
        text = span_text(entry, source_dir, mount)
        if text is None:
            left_out.append(f"{entry} (not found in the original)")
        elif used + len(text) > limit:
            left_out.append(f"{entry} (over the {limit:,}-character size of this section)")
        else:
            shown.append(text)
            used += len(text)
    left_out += [f"{entry} (past the first {MAX_ENTRIES} cited spans)" for entry in entries[MAX_ENTRIES:]]
    if left_out:
        shown.append("Not included: " + "; ".join(left_out))
    return "\n\n".join(shown)


def span_text(entry: str, source_dir: Path, mount: str) -> str | None:
    """`entry`'s lines of the original, each numbered, under a `path:first-last` heading; None where the
    file or the definition is not in the original."""
    found = LINES.match(entry) or DEFINITION.match(entry)
    if found is None:
        return None
    host = inside(source_dir, mount, found["path"])
    if host is None:
        return None
    try:
        lines = read_regular_text(host, MAX_FILE_BYTES).splitlines()
    except AgentFileError:
        return None
    if "name" in found.groupdict():
        bounds = definition_lines("\n".join(lines), found["name"])
    elif found["last"]:
        bounds = (int(found["first"]), int(found["last"]))
    else:
        line = int(found["first"])
        bounds = (line - AROUND[0], line + AROUND[1])
    if bounds is None:
        return None
    first, last = max(1, bounds[0]), min(len(lines), bounds[1], max(1, bounds[0]) + MAX_SPAN_LINES - 1)
    if first > last:
        return None
    width = len(str(last))
    body = "\n".join(f"{n:>{width}} | {lines[n - 1]}" for n in range(first, last + 1))
    shown = f"{mount.rstrip('/')}/{host.relative_to(source_dir.resolve()).as_posix()}"
    return f"{shown}:{first}-{last}\n{body}"


def inside(source_dir: Path, mount: str, path: str) -> Path | None:
    """The host file `path` names inside the original (under `mount`, or relative to it); None outside."""
    prefix = mount.rstrip("/") + "/"
    if path.startswith("/"):
        if not path.startswith(prefix):
            return None
        path = path[len(prefix) :]
    try:
        root = source_dir.resolve()
        host = (root / path).resolve()
    except (OSError, RuntimeError, ValueError):  # a link loop, a name the system refuses
        return None
    return host if host.is_relative_to(root) and host != root else None


def definition_lines(text: str, name: str) -> tuple[int, int] | None:
    """First and last line of the definition `name` (`Class.method` for one inside a class), decorators
    included; None where the file does not parse or holds no such definition."""
    try:
        nodes = ast.parse(text).body
    except (SyntaxError, ValueError):
        return None
    found = None
    for part in name.split("."):
        found = next(
            (
                n
                for n in nodes
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
            ),
            None,
        )
        if found is None:
            return None
        nodes = found.body if isinstance(found, ast.ClassDef) else []
    first = min([found.lineno, *(d.lineno for d in found.decorator_list)])
    return first, found.end_lineno or found.lineno
