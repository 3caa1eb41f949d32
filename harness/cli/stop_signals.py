"""SIGTERM and SIGHUP stop twin as Ctrl-C does, and the first of the three holds off the rest.

A scheduler stops a job with SIGTERM, and a closed terminal sends SIGHUP; by default either
ends the process at once, leaving a run's capped candidate mounted (and its loop device
attached) and its state saying it is still running. Here each raises `StopSignal`, a
`KeyboardInterrupt`, in the main thread: whatever Ctrl-C cleans up, they clean up too. A
second signal of any of the three (a scheduler's repeated SIGTERM, Ctrl-C pressed again, a
signal to the group on top of one to the process) would cut that clean-up short, so the first
ignores them all until twin is done. A signal already ignored when twin starts (`nohup`, a
shell's background job) stays ignored.

Ctrl-C reaches every process of the terminal's foreground group; a `kill PID` reaches one.
So where twin leads its own process group (started from a shell), SIGTERM and SIGHUP are passed
on to that group, as Ctrl-C would have been. A twin in someone else's group (a script's, a
test's) passes nothing on to it: `twin bench` stops its own trials itself
(`harness.bench.trial_processes`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ground.errors import StopSignal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop twin as Ctrl-C does."""
HELD_OFF = (signal.SIGINT, *STOP_SIGNALS)
"""The first of these starts the clean stop; all of them are ignored after it."""

_received: list[int] = []


def stop_line() -> str | None:
    """How this process was stopped ('stopped by SIGTERM', 'interrupted' for Ctrl-C), or None: it was not.

    The command-line layer (typer) turns a stop raised inside a command that does not handle it
    into a bare exit 130; the entry point says this line for it (`harness.cli.app`).
    """
    if not _received:
        return None
    return "interrupted" if _received[0] == signal.SIGINT else f"stopped by {signal.Signals(_received[0]).name}"


@contextmanager
def stopping_on_signals(*, restore_after_stop: bool = True) -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise `StopSignal`, SIGINT `KeyboardInterrupt`; handlers put back after.

    The first such signal also ignores any later one, so that the clean stop it starts (the
    same as Ctrl-C's) is not cut short by a second; SIGKILL still ends the process at once.
    Outside the main thread (where no handler can be set) nothing changes.

    Args:
        restore_after_stop: put the handlers back also after a stop. The command line's entry
            point says False: its process is on its way out then, and a late signal put back to its
            default action would end it by that signal (not its exit code) after all was saved.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in HELD_OFF}

    stopped = []

    def stop(number: int, _frame) -> None:
        stopped.append(number)
        _received.append(number)
        for each in HELD_OFF:
            signal.signal(each, signal.SIG_IGN)
        if number == signal.SIGINT:  # Ctrl-C reached the whole foreground group already
            raise KeyboardInterrupt
        if os.getpgrp() == os.getpid():  # this twin's own group only: never a parent's or a sibling's
            os.killpg(os.getpgrp(), number)  # (ignored here now)
        raise StopSignal(signal.Signals(number).name)

    for number, handler in previous.items():
        if handler is not signal.SIG_IGN:  # whoever started twin chose to ignore it (`nohup`): it stays so
            signal.signal(number, stop)
    try:
        yield
    finally:
        if restore_after_stop or not stopped:
            for number, handler in previous.items():
                signal.signal(number, handler)
