"""SIGTERM and SIGHUP stop twin as Ctrl-C does.

A scheduler stops a job with SIGTERM, and a closed terminal sends SIGHUP; by default either
ends the process at once, leaving a run's capped candidate mounted (and its loop device
attached) and its state saying it is still running. Here each raises `StopSignal`, a
`KeyboardInterrupt`, in the main thread: whatever Ctrl-C cleans up, they clean up too.

Ctrl-C reaches every process of the terminal's foreground group; a `kill PID` reaches one.
So where twin leads its own process group (started from a shell), the signal is passed on
to that group, as Ctrl-C would have been: `twin bench`'s trials (each a `twin migrate`) stop
cleanly too. A twin in someone else's group (a script's, a test's) passes nothing on.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ground.errors import StopSignal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise `StopSignal`; the handlers before are put back after.

    The first such signal also ignores any later one, so that the clean stop it starts (the
    same as Ctrl-C's) is not cut short by a second; SIGKILL still ends the process at once.
    Outside the main thread (where no handler can be set) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}

    def stop(number: int, _frame) -> None:
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        if os.getpgrp() == os.getpid():  # this twin's own group only: never a parent's or a sibling's
            os.killpg(os.getpgrp(), number)  # (ignored here now)
        raise StopSignal(signal.Signals(number).name)

    for number in STOP_SIGNALS:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
