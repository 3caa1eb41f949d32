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


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system, with reaped children's) of a live process and all its descendants.

    Read from `/proc` at one moment, to say how much of a command's wall time its processes
    had the CPU for (a loaded machine gives them little); None where the process is gone.
    """
    children: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None or len(fields) < 15:
            continue
        child = int(name)
        children.setdefault(int(fields[1]), []).append(child)
        cpu[child] = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    if pid not in cpu:
        return None
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        total += cpu.get(current, 0)
        todo.extend(children.get(current, []))
    return total / os.sysconf("SC_CLK_TCK")
