"""Which process owns what a sandbox leaves on disk while it runs (slots, capped roots).

A record names its owner by `pid start-time`, which names one process even after its
pid is reused; a later twin recovers a record only once that process is gone.
"""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of `/proc/PID/stat` after the command name (state first), or None where there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_tag(pid: int) -> str | None:
    """`pid start-time` of a live process, or None where there is no such process."""
    fields = _stat_fields(pid)
    return f"{pid} {fields[19]}" if fields is not None and len(fields) > 19 else None


def parent_pid(pid: int) -> int | None:
    """The parent of a live process, or None where there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None and len(fields) > 1 else None


def own_tag() -> str:
    """This process's tag ("" where /proc cannot tell)."""
    return process_tag(os.getpid()) or ""


def owner_alive(tag: str) -> bool:
    """Whether the process a record's tag names is still running (an empty or garbled tag: no)."""
    head = tag.split()[0] if tag.split() else ""
    return head.isdigit() and int(head) > 0 and process_tag(int(head)) == tag


def _process_table() -> dict[int, list[str]]:
    """Every live process's `/proc/PID/stat` fields (after the command name), read in one pass."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None and len(fields) >= 15:
                table[int(name)] = fields
    return table


def descendants(pid: int, table: dict[int, list[str]] | None = None) -> list[int]:
    """Every process under `pid` (children, theirs, ...), from `table` or a fresh reading of `/proc`."""
    table = _process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, fields in table.items():
        children.setdefault(int(fields[1]), []).append(child)
    found, todo, seen = [], [pid], {pid}
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system, with reaped children's) of a live process and all its descendants.

    Read from `/proc` at one moment, to say how much of a command's wall time its processes
    had the CPU for (a loaded machine gives them little); None where the process is gone.
    """
    table = _process_table()
    if pid not in table:
        return None
    ticks = sum(sum(int(f) for f in table[p][11:15]) for p in [pid, *descendants(pid, table)])  # utime..cstime
    return ticks / os.sysconf("SC_CLK_TCK")
