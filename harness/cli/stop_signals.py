"""SIGTERM and SIGHUP stop twin as Ctrl-C does.

A scheduler stops a job with SIGTERM, and a closed terminal sends SIGHUP; by default either
ends the process at once, leaving a run's capped candidate mounted (and its loop device
attached) and its state saying it is still running. Here each raises `StopSignal`, a
`KeyboardInterrupt`, in the main thread: whatever Ctrl-C cleans up, they clean up too.
"""

from __future__ import annotations

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
        raise StopSignal(signal.Signals(number).name)

    for number in STOP_SIGNALS:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
