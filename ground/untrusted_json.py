"""Parsing JSON that a model, an outside program or an agent wrote: every failure is one error.

Python's `json.loads` fails in several ways on hostile text: `JSONDecodeError` for bad syntax,
`UnicodeDecodeError` for bytes that are not UTF-8, `RecursionError` for arrays nested past the
interpreter's recursion limit, a plain `ValueError` for an integer past the int-digits limit.
Every reader of such text goes through `loads_untrusted`, which turns each of them, and a value
nested deeper than `MAX_DEPTH`, into an `UntrustedJSONError` (a `ValueError`) with one line
that says why: the caller treats it the one way it treats malformed input.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 100  # nesting of arrays and objects: far past any tool's arguments, far below the recursion limit


class UntrustedJSONError(ValueError):
    """Text that is not usable JSON; the message says why in one line."""


def loads_untrusted(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse `data` (UTF-8 bytes or text) as JSON nested at most `max_depth` deep.

    Raises:
        UntrustedJSONError: not UTF-8, not JSON, nested too deeply, or a number Python refuses.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text)
    except UnicodeDecodeError as exc:
        raise UntrustedJSONError(f"not UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(f"not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise UntrustedJSONError("nested too deeply") from None
    except ValueError as exc:  # e.g. an integer over the interpreter's int-digits limit
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UntrustedJSONError(f"not usable JSON ({reason})") from None
    if _depth_over(value, max_depth):
        raise UntrustedJSONError(f"nested more than {max_depth} deep")
    return value


def _depth_over(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` deep (iterative: any depth is safe)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
