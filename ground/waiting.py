"""A wait the user can see: what twin waits for, said once it has lasted `NOTICE_S`.

A first run on a new cache builds things (the environment the sandbox mounts, a task's
copy) and may wait for another process building the same; a user looking at a silent
terminal, or a CI log, cannot tell that from a hang. `waiting_for(what)` says
`twin: waiting for <what> (N s so far)` on stderr once the block has lasted 2 s, piped or
not, and `twin: done: <what> after N s` when it ends well; a block that ends sooner says nothing,
and one that raises leaves the saying to its error. `$TWIN_WAIT_NOTICE_S` sets the 2 s.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ground.terminal import shown

NOTICE_S = 2.0
"""A wait longer than this says what it waits for (unless `$TWIN_WAIT_NOTICE_S` says otherwise)."""
REPEAT_S = 30.0
"""A wait still running says so again this often (one line each)."""


def _stderr(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr: the wait goes on unsaid
        pass


@contextmanager
def waiting_for(
    what: str, *, say: Callable[[str], None] | None = None, notice_s: float | None = None
) -> Iterator[None]:
    """Say what the block waits for if it lasts over `notice_s` (then every `REPEAT_S`), and when it ends.

    Args:
        what: what is waited for, e.g. `a copy of /venv/site-packages without torch`; shown with its
            control characters escaped.
        say: where the lines go (default: stderr).
        notice_s: how long a wait goes unsaid (default `$TWIN_WAIT_NOTICE_S`, else `NOTICE_S`).
    """
    say = say or _stderr
    notice_s = _default_notice_s() if notice_s is None else notice_s
    started = time.monotonic()
    stop = threading.Event()
    said = threading.Event()

    def watch() -> None:
        wait = notice_s
        while not stop.wait(wait):
            said.set()
            say(f"twin: waiting for {shown(what)} ({time.monotonic() - started:.0f} s so far)")
            wait = REPEAT_S

    watcher = threading.Thread(target=watch, daemon=True, name="twin-waiting")
    watcher.start()
    try:
        yield
    except BaseException:
        stop.set()
        watcher.join()
        raise
    stop.set()
    watcher.join()
    if said.is_set():
        say(f"twin: done: {shown(what)} after {time.monotonic() - started:.0f} s")


def _default_notice_s() -> float:
    """`$TWIN_WAIT_NOTICE_S` where it is a number of seconds, else `NOTICE_S`."""
    try:
        return float(os.environ["TWIN_WAIT_NOTICE_S"])
    except (KeyError, ValueError):
        return NOTICE_S


@contextmanager
def status_or_waiting(console: Any, what: str) -> Iterator[None]:
    """On a terminal, `console`'s spinner saying `what`; piped (a CI log, a file), `waiting_for(what)`'s lines.

    A spinner is drawn only on a terminal: piped, a command that grades for minutes would say nothing.
    """
    if console.is_terminal:
        with console.status(what):
            yield
    else:
        with waiting_for(what):
            yield
