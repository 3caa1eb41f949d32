"""The one console for output that may hold text from an agent, a candidate, a grader or a task.

rich reads `[bold]`, `[/]` and `:emoji:` in plain strings as markup: a candidate's
exception message `[/]` raises `MarkupError` in the middle of a table, and `[white
on white]` hides a row. A terminal reads escape sequences (`ESC [ ... m`, a carriage
return, a bidirectional override) in the same text as commands. `agent_console`
returns a rich `Console` on which neither happens:

- every string it renders (printed, a table cell, a title, a status line) is taken
  literally: markup and emoji codes are off and cannot be switched back on per call;
- control characters (C0 but newline and tab, DEL, C1) and bidirectional controls
  are shown as visible escapes (`\\x1b`, `\\u202e`) by `shown`, never sent.

twin's own styling is a `rich.text.Text` built with a style (`styled`), never markup
in a string; agent text put into a `Text` the harness builds goes through `shown`.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.text import Text

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """`text` as a string whose control and bidirectional characters are visible escapes."""
    return _CONTROLS.sub(_escape, str(text))


def styled(text: object, style: str = "") -> Text:
    """Harness styling around text that may be an agent's: the text is never markup, its controls shown."""
    return Text(shown(text), style=style)


class AgentSafeConsole(Console):
    """A `Console` that renders every string literally (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("highlight", False)
        kwargs.update(markup=False, emoji=False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False)
        return super().render_str(shown(text), **kwargs)

    def status(self, status: Any, **kwargs: Any) -> Any:
        """rich's status line reads a string as markup; this one shows it literally."""
        return super().status(styled(status) if isinstance(status, str) else status, **kwargs)


def agent_console(**kwargs: Any) -> Console:
    """The console every CLI view uses (keyword arguments as rich's `Console`, e.g. `stderr=True`)."""
    return AgentSafeConsole(**kwargs)
